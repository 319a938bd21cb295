#!/usr/bin/python3
"""Soak: a 2-worker loopback cluster under mixed load for a set time, with a worker killed and restarted
every few minutes.

Client threads loop until the deadline over a random mix of
  * Generate streamed to completion (greedy, or sampled with a fixed seed);
  * Generate cancelled by the client after a few tokens;
  * Generate whose channel the client closes mid-stream (a disconnect);
  * Score;
  * SubmitJob, then StreamJob (from 0 or an offset), GetJob polling, CancelJob, or nothing at all.
Every request uses one of a few fixed inputs whose output was recorded before the load started, so every
later answer (streamed, cancelled prefix, job ids, logprobs) is held to it: exactness through the batching
and through the restarts (the coordinator replays in-flight sequences).

Every `--restart-every` seconds one worker (alternating) is killed with SIGKILL and started again on its
address. UNAVAILABLE seen while the pipeline is recovering is a status the client saw; it is counted apart.

The RSS (VmRSS) of the coordinator and of every worker incarnation is sampled every few seconds. After
`--warmup` seconds, the median of the first minute of a process's samples is compared with the median of
its last minute: growth beyond `--rss-bound-mb` fails the run.

At the end: every submitted job must reach a terminal state, the coordinator must go idle (no running or
queued sequence, no KV held on any stage), and a summary is printed. Exit status 1 on a mismatch, a lost
request (a stream that hung past its deadline, or ended without its final message, or a job that never
ended), an unexpected gRPC code, or RSS growth beyond the bound. Every process is killed on exit.

  bench/soak.py [--bin build/bin] [--minutes 10] [--clients 4] [--restart-every 180] [--seed 1]
"""

import argparse
import collections
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import grpc

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(REPO, "tests"))
from pb_loader import load_layerpipe_pb2  # noqa: E402
from proc_harness import Process, ProcessError, small_checkpoint_argv  # noqa: E402

pb = None
SERVICE = "/layerpipe.v1.LayerPipe/"
STARTUP_TIMEOUT = 120   # seconds for a server's "listening on" line
RPC_TIMEOUT = 150       # seconds: a generation or a job that has not ended by then is counted lost
UNARY_TIMEOUT = 30      # seconds for the short unary calls (GetJob, CancelJob, ClusterStatus, ...)
RESTART_GRACE = 5.0     # seconds after the pipeline serves again in which UNAVAILABLE still is the restart's
STOP_IDS = [1]
MAX_POSITIONS = 1024
VOCAB = 512
WORKERS = 2

TERMINAL = None  # job states that are final (set once pb is loaded)


def now():
    return time.monotonic()


# ------------------------------------------------------------------------------------------------------
# The cluster: processes, restarts, RSS
# ------------------------------------------------------------------------------------------------------

class Incarnation:
    """One run of one server process: its RSS samples are a series of their own."""

    def __init__(self, name, number, proc, started):
        self.name = name
        self.number = number
        self.proc = proc
        self.started = started
        self.ended = None
        self.killed = False
        self.samples = []  # (monotonic time, kB)


class Cluster:
    def __init__(self, bin_dir, model, logs, precision, worker_threads, coordinator_flags=()):
        self.bin = bin_dir
        self.logs = logs
        self.worker_threads = worker_threads
        self.lock = threading.Lock()
        self.procs = []          # every Process ever started, for close()
        self.incarnations = []   # every Incarnation, in start order
        self.current = {}        # name -> the live Incarnation
        self.addresses = []
        try:
            for i in range(WORKERS):
                self._start(f"worker{i}", self._worker_argv("127.0.0.1:0"))
            for i in range(WORKERS):
                self.addresses.append(self.current[f"worker{i}"].proc.wait_listening(STARTUP_TIMEOUT))
            argv = [os.path.join(bin_dir, "layerpipe-coordinator"), "--listen", "127.0.0.1:0", "--model", model,
                    "--workers", ",".join(self.addresses), "--precision", precision, *coordinator_flags]
            self._start("coordinator", argv)
            self.address = self.current["coordinator"].proc.wait_listening(STARTUP_TIMEOUT)
        except BaseException:
            self.close()
            raise

    def _worker_argv(self, listen):
        return [os.path.join(self.bin, "layerpipe-worker"), "--listen", listen, "--threads", str(self.worker_threads)]

    def _start(self, name, argv):
        proc = Process(argv, name, self.logs)
        with self.lock:
            self.procs.append(proc)
            number = sum(1 for inc in self.incarnations if inc.name == name)
            inc = Incarnation(name, number, proc, now())
            self.incarnations.append(inc)
            self.current[name] = inc
        return inc

    def kill_worker(self, i):
        """SIGKILL to worker i; returns once it is reaped."""
        with self.lock:
            inc = self.current[f"worker{i}"]
            inc.killed = True  # not an unexpected death
        inc.proc.kill_group(signal.SIGKILL)
        inc.proc.wait(30)
        with self.lock:
            inc.ended = now()

    def start_worker(self, i):
        """Worker i again, on its old address."""
        inc = self._start(f"worker{i}", self._worker_argv(self.addresses[i]))
        got = inc.proc.wait_listening(STARTUP_TIMEOUT)
        if got.rsplit(":", 1)[-1] != self.addresses[i].rsplit(":", 1)[-1]:
            raise RuntimeError(f"restarted worker{i} listens on {got}, not {self.addresses[i]}")

    def live(self):
        with self.lock:
            return [inc for inc in self.current.values() if inc.ended is None]

    def dead_unexpectedly(self):
        """The live incarnations whose process has exited although nobody killed it."""
        return [inc for inc in self.live() if not inc.killed and inc.proc.popen.poll() is not None]

    def close(self):
        with self.lock:
            procs = list(self.procs)
        for p in procs:
            p.close()


def vm_rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def rss_sampler(cluster, stop, interval):
    while not stop.wait(interval):
        for inc in cluster.live():
            kb = vm_rss_kb(inc.proc.pid)
            if kb is not None and inc.proc.popen.poll() is None:
                with cluster.lock:
                    inc.samples.append((now(), kb))


# ------------------------------------------------------------------------------------------------------
# Bookkeeping
# ------------------------------------------------------------------------------------------------------

OUTCOMES = ["completed", "cancelled", "disconnected", "unavail_restart", "error", "lost"]


class Restarts:
    """When each restart began and when the pipeline was serving again: UNAVAILABLE inside is expected."""

    def __init__(self):
        self.lock = threading.Lock()
        self.windows = []  # [worker, killed, listening, ready] (monotonic; None while pending)
        self.t0 = now()    # the load's start

    def begin(self, worker):
        with self.lock:
            w = [worker, now(), None, None]
            self.windows.append(w)
            return w

    def in_window(self, t):
        with self.lock:
            for _, killed, _, ready in self.windows:
                if killed - 0.5 <= t and (ready is None or t <= ready + RESTART_GRACE):
                    return True
        return False


class Ledger:
    def __init__(self, restarts):
        self.lock = threading.Lock()
        self.restarts = restarts
        self.outcomes = collections.Counter()      # (kind, outcome) -> n
        self.codes = collections.Counter()         # (rpc, code name) -> n
        self.code_messages = collections.defaultdict(list)  # code name -> a few distinct messages
        self.compared = collections.Counter()      # kind -> outputs held to their reference
        self.mismatches = []
        self.lost = []
        self.unexpected = []
        self.soak_errors = []                      # exceptions of this script itself
        self.jobs = {}                             # job id -> {"spec", "cancel", "submitted"}
        self.tokens = 0

    def rpc(self, rpc, code, message=""):
        name = code.name if code is not None else "OK"
        with self.lock:
            self.codes[(rpc, name)] += 1
            msgs = self.code_messages[name]
            if name != "OK" and message and message not in msgs and len(msgs) < 4:
                msgs.append(message)

    def outcome(self, kind, outcome, detail=None):
        with self.lock:
            self.outcomes[(kind, outcome)] += 1
            if outcome == "lost":
                self.lost.append(f"{kind}: {detail}")
            elif outcome == "error":
                self.unexpected.append(f"{kind}: {detail}")

    def mismatch(self, kind, detail):
        t = now()
        with self.lock:
            self.mismatches.append(f"{kind}: {detail} (near a restart: {self.restarts.in_window(t)})")

    def compare(self, kind, ok, detail):
        with self.lock:
            self.compared[kind] += 1
        if not ok:
            self.mismatch(kind, detail)

    def failed_rpc(self, kind, rpc, e, ours=None):
        """Counts a gRPC error of the call that ended `kind`'s request and returns its outcome. `ours` is what
        the client did to the call itself ("cancel" or "disconnect")."""
        code = e.code() if isinstance(e, grpc.RpcError) else None
        details = (e.details() if isinstance(e, grpc.RpcError) else str(e)) or ""
        self.rpc(rpc, code, details)
        if ours == "cancel" and code == grpc.StatusCode.CANCELLED:
            out = "cancelled"
        elif ours == "disconnect" and code == grpc.StatusCode.CANCELLED:
            out = "disconnected"
        elif code == grpc.StatusCode.UNAVAILABLE and self.restarts.in_window(now()):
            out = "unavail_restart"
            time.sleep(0.2)  # as a client would back off, rather than count refusals by the thousand
        elif code == grpc.StatusCode.DEADLINE_EXCEEDED:
            out = "lost"
        else:
            out = "error"
        self.outcome(kind, out, f"{rpc}: {code.name if code else type(e).__name__}: {details}")
        return out


# ------------------------------------------------------------------------------------------------------
# Requests
# ------------------------------------------------------------------------------------------------------

class Spec:
    """A fixed generation: its prompt, length and sampling, and the ids recorded before the load began."""

    def __init__(self, key, ids, max_new, temperature=None, seed=None):
        self.key = key
        self.ids = ids
        self.max_new = max_new
        self.temperature = temperature
        self.seed = seed
        self.ref = None

    def request(self):
        sampling = pb.SamplingParams()
        if self.temperature is not None:
            sampling = pb.SamplingParams(temperature=self.temperature, top_k=40, seed=self.seed)
        return pb.GenerateRequest(ids=pb.TokenIds(ids=self.ids), max_new_tokens=self.max_new, stop_ids=STOP_IDS,
                                  sampling=sampling)


def make_specs(rng):
    def prompt(n):
        return [2] + [rng.randrange(3, VOCAB) for _ in range(n - 1)]
    gen = [Spec(f"greedy{i}", prompt(rng.randrange(4, 64)), rng.choice([8, 16, 32, 48, 64])) for i in range(8)]
    gen += [Spec(f"sampled{i}", prompt(rng.randrange(4, 40)), rng.choice([16, 32, 48]), temperature=0.8,
                 seed=1000 + i) for i in range(3)]
    # Long enough to be mid-generation when a worker is killed, short enough for the RPC deadline.
    long = [Spec(f"long{i}", prompt(rng.randrange(8, 32)), 320) for i in range(2)]
    scores = [prompt(rng.randrange(4, 96)) for _ in range(4)]
    return gen, long, scores


class StreamBroken(Exception):
    """A stream whose messages do not add up (offsets, usage, finish reason): its request is lost."""


def read_stream(it, base=0, stop_after=None):
    """Reads a GenerateResponse stream; returns (ids, final message or None). With stop_after, returns
    as soon as that many ids have arrived (the stream still open)."""
    ids = []
    final = None
    for msg in it:
        if msg.tokens:
            if msg.offset != base + len(ids):
                raise StreamBroken(f"message at offset {msg.offset} after {base + len(ids)} tokens")
            ids += [t.id for t in msg.tokens]
        if msg.finish_reason:
            final = msg
            break
        if stop_after is not None and len(ids) >= stop_after:
            return ids, None
    if final is None:
        raise StreamBroken(f"stream ended OK after {len(ids)} tokens without a finish reason")
    return ids, final


def check_final(spec, ids, final, base=0):
    if final.finish_reason not in ("stop", "length"):
        raise StreamBroken(f"finish reason {final.finish_reason!r}")
    if final.usage.completion_tokens != base + len(ids):
        raise StreamBroken(f"usage says {final.usage.completion_tokens} tokens, {base + len(ids)} arrived")
    if final.finish_reason == "length" and base + len(ids) != spec.max_new:
        raise StreamBroken(f"finish 'length' after {base + len(ids)} of {spec.max_new} tokens")


class Client:
    def __init__(self, address, ledger, gen_specs, long_specs, score_specs, score_tol):
        self.address = address
        self.ledger = ledger
        self.gen = gen_specs
        self.long = long_specs
        self.scores = score_specs  # [(ids, reference logprobs)]
        self.score_tol = score_tol

    # The calls, on any channel.
    @staticmethod
    def generate_call(channel):
        return channel.unary_stream(SERVICE + "Generate", request_serializer=pb.GenerateRequest.SerializeToString,
                                    response_deserializer=pb.GenerateResponse.FromString)

    @staticmethod
    def stream_job_call(channel):
        return channel.unary_stream(SERVICE + "StreamJob", request_serializer=pb.StreamJobRequest.SerializeToString,
                                    response_deserializer=pb.GenerateResponse.FromString)

    @staticmethod
    def unary(channel, method, request, response_type, timeout=UNARY_TIMEOUT):
        call = channel.unary_unary(SERVICE + method, request_serializer=type(request).SerializeToString,
                                   response_deserializer=response_type.FromString)
        return call(request, timeout=timeout)

    def hold(self, kind, spec, ids, base=0, whole=True):
        """ids (from token `base` on) against the reference: all of it, or (whole=False) its prefix."""
        want = spec.ref[base:] if whole else spec.ref[base:base + len(ids)]
        if ids == want:
            return self.ledger.compare(kind, True, "")
        at = next((i for i, (a, b) in enumerate(zip(ids, want)) if a != b), min(len(ids), len(want)))
        self.ledger.compare(kind, False, f"{spec.key} from {base}: got {ids[:12]}... ({len(ids)}), want "
                                         f"{want[:12]}... ({len(want)}), first difference at {at}")

    # -- Generate ---------------------------------------------------------------------------------------

    def gen_full(self, channel, rng):
        spec = rng.choice(self.gen + self.long[:1])
        try:
            ids, final = read_stream(self.generate_call(channel)(spec.request(), timeout=RPC_TIMEOUT))
            check_final(spec, ids, final)
        except grpc.RpcError as e:
            return self.ledger.failed_rpc("gen_full", "Generate", e)
        except StreamBroken as e:
            self.ledger.rpc("Generate", None)
            return self.ledger.outcome("gen_full", "lost", f"{spec.key}: {e}")
        self.ledger.rpc("Generate", None)
        self.ledger.outcome("gen_full", "completed")
        with self.ledger.lock:
            self.ledger.tokens += len(ids)
        self.hold("gen_full", spec, ids)

    def gen_cancel(self, channel, rng):
        spec = rng.choice(self.gen + self.long)
        k = rng.randrange(1, 9)
        ids = None
        try:
            it = self.generate_call(channel)(spec.request(), timeout=RPC_TIMEOUT)
            ids, final = read_stream(it, stop_after=k)
            if final is not None:  # ended before we could cancel it
                check_final(spec, ids, final)
                self.ledger.rpc("Generate", None)
                self.ledger.outcome("gen_cancel", "completed")
                self.hold("gen_cancel", spec, ids)
                return
            it.cancel()
            for _ in it:  # the cancel ends the stream with CANCELLED
                pass
            raise StreamBroken("the stream ended OK after the client cancelled it")
        except grpc.RpcError as e:
            out = self.ledger.failed_rpc("gen_cancel", "Generate", e, ours="cancel" if ids is not None else None)
            if out == "cancelled":
                self.hold("gen_cancel", spec, ids, whole=False)
        except StreamBroken as e:
            self.ledger.outcome("gen_cancel", "lost", f"{spec.key}: {e}")

    def gen_disconnect(self, _channel, rng):
        spec = rng.choice(self.gen + self.long)
        k = rng.randrange(1, 9)
        own = grpc.insecure_channel(self.address)
        ids = None
        try:
            it = self.generate_call(own)(spec.request(), timeout=RPC_TIMEOUT)
            ids, final = read_stream(it, stop_after=k)
            if final is not None:
                check_final(spec, ids, final)
                self.ledger.rpc("Generate", None)
                self.ledger.outcome("gen_disconnect", "completed")
                self.hold("gen_disconnect", spec, ids)
                return
            own.close()  # mid-stream: the coordinator sees the client go away
            for _ in it:
                pass
            raise StreamBroken("the stream ended OK after its channel was closed")
        except grpc.RpcError as e:
            out = self.ledger.failed_rpc("gen_disconnect", "Generate", e,
                                         ours="disconnect" if ids is not None else None)
            if out == "disconnected":
                self.hold("gen_disconnect", spec, ids, whole=False)
        except (StreamBroken, ValueError) as e:
            self.ledger.outcome("gen_disconnect", "lost", f"{spec.key}: {e}")
        finally:
            own.close()

    # -- Score ------------------------------------------------------------------------------------------

    def score(self, channel, rng):
        ids, ref = rng.choice(self.scores)
        try:
            resp = self.unary(channel, "Score", pb.ScoreRequest(ids=pb.TokenIds(ids=ids)), pb.ScoreResponse,
                              timeout=RPC_TIMEOUT)
        except grpc.RpcError as e:
            return self.ledger.failed_rpc("score", "Score", e)
        self.ledger.rpc("Score", None)
        self.ledger.outcome("score", "completed")
        got = list(resp.logprobs)
        diff = max((abs(a - b) for a, b in zip(got, ref)), default=0.0) if len(got) == len(ref) else float("inf")
        self.ledger.compare("score", list(resp.ids) == ids and diff <= self.score_tol,
                            f"{len(ids)} ids: logprobs differ from the reference by {diff}")

    # -- Jobs -------------------------------------------------------------------------------------------

    def submit(self, channel, kind, spec):
        try:
            job = self.unary(channel, "SubmitJob", pb.SubmitJobRequest(request=spec.request()),
                             pb.SubmitJobResponse).job_id
        except grpc.RpcError as e:
            self.ledger.failed_rpc(kind, "SubmitJob", e)
            return None
        self.ledger.rpc("SubmitJob", None)
        with self.ledger.lock:
            self.ledger.jobs[job] = {"spec": spec, "cancel": False, "submitted": now()}
        return job

    def poll_job(self, channel, kind, job, limit=RPC_TIMEOUT):
        """GetJob until the job is terminal: its JobInfo, or None (outcome recorded) if it failed or hung."""
        deadline = now() + limit
        while True:
            try:
                info = self.unary(channel, "GetJob", pb.GetJobRequest(job_id=job), pb.JobInfo)
            except grpc.RpcError as e:
                self.ledger.failed_rpc(kind, "GetJob", e)
                return None
            self.ledger.rpc("GetJob", None)
            if info.state in TERMINAL:
                return info
            if now() > deadline:
                self.ledger.outcome(kind, "lost", f"job {job} still {pb.JobState.Name(info.state)} after {limit}s")
                return None
            time.sleep(0.2)

    def job_outcome(self, kind, spec, info, cancelled_by_us):
        if info.state == pb.JOB_SUCCEEDED:
            self.ledger.outcome(kind, "completed")
            self.hold(kind, spec, list(info.ids))
        elif info.state == pb.JOB_CANCELLED and cancelled_by_us:
            self.ledger.outcome(kind, "cancelled")
            self.hold(kind, spec, list(info.ids), whole=False)
        else:
            self.ledger.outcome(kind, "error", f"job {info.job_id} ended {pb.JobState.Name(info.state)}: {info.error}")

    def job_stream(self, channel, rng):
        spec = rng.choice(self.gen + self.long[:1])
        job = self.submit(channel, "job_stream", spec)
        if job is None:
            return
        base = rng.choice([0, 0, rng.randrange(0, max(len(spec.ref), 1))])
        try:
            ids, final = read_stream(self.stream_job_call(channel)(pb.StreamJobRequest(job_id=job, offset=base),
                                                                   timeout=RPC_TIMEOUT), base=base)
            check_final(spec, ids, final, base=base)
        except grpc.RpcError as e:
            return self.ledger.failed_rpc("job_stream", "StreamJob", e)
        except StreamBroken as e:
            return self.ledger.outcome("job_stream", "lost", f"{spec.key} job {job} from {base}: {e}")
        self.ledger.rpc("StreamJob", None)
        self.ledger.outcome("job_stream", "completed")
        self.hold("job_stream", spec, ids, base=base)

    def job_poll(self, channel, rng):
        spec = rng.choice(self.gen)
        job = self.submit(channel, "job_poll", spec)
        if job is None:
            return
        info = self.poll_job(channel, "job_poll", job)
        if info is not None:
            self.job_outcome("job_poll", spec, info, False)

    def job_cancel(self, channel, rng):
        spec = rng.choice(self.long) if rng.random() < 0.7 else rng.choice(self.gen)
        job = self.submit(channel, "job_cancel", spec)
        if job is None:
            return
        time.sleep(rng.uniform(0, 0.3))
        with self.ledger.lock:
            self.ledger.jobs[job]["cancel"] = True
        try:
            self.unary(channel, "CancelJob", pb.CancelJobRequest(job_id=job), pb.JobInfo)
        except grpc.RpcError as e:
            return self.ledger.failed_rpc("job_cancel", "CancelJob", e)
        self.ledger.rpc("CancelJob", None)
        info = self.poll_job(channel, "job_cancel", job)
        if info is not None:
            self.job_outcome("job_cancel", spec, info, True)

    def job_orphan(self, channel, rng):
        """Submitted and left: the final sweep must find it finished."""
        if self.submit(channel, "job_orphan", rng.choice(self.gen + self.long[:1])) is not None:
            self.ledger.outcome("job_orphan", "completed")

    def status(self, channel, rng):
        try:
            if rng.random() < 0.5:
                self.unary(channel, "ClusterStatus", pb.ClusterStatusRequest(), pb.ClusterStatusResponse)
                self.ledger.rpc("ClusterStatus", None)
            else:
                self.unary(channel, "ListJobs", pb.ListJobsRequest(), pb.ListJobsResponse)
                self.ledger.rpc("ListJobs", None)
        except grpc.RpcError as e:
            return self.ledger.failed_rpc("status", "ClusterStatus/ListJobs", e)
        self.ledger.outcome("status", "completed")

    MIX = [("gen_full", 30), ("gen_cancel", 12), ("gen_disconnect", 10), ("score", 14), ("job_stream", 10),
           ("job_poll", 8), ("job_cancel", 7), ("job_orphan", 4), ("status", 5)]

    def loop(self, index, seed, deadline, stop, mix):
        rng = random.Random(seed * 7919 + index)
        channel = grpc.insecure_channel(self.address)
        kinds, weights = zip(*mix)
        try:
            while now() < deadline and not stop.is_set():
                kind = rng.choices(kinds, weights)[0]
                try:
                    getattr(self, kind)(channel, rng)
                except Exception:  # noqa: BLE001 - a bug of this script, not of the servers: report, go on
                    with self.ledger.lock:
                        self.ledger.soak_errors.append(f"{kind}: {traceback.format_exc()}")
                    time.sleep(0.5)
                time.sleep(rng.uniform(0, 0.02))
        finally:
            channel.close()


# ------------------------------------------------------------------------------------------------------
# Restarts
# ------------------------------------------------------------------------------------------------------

def wait_ready(channel, limit):
    """Polls ClusterStatus until the pipeline is ready with every stage serving; the time, or None."""
    deadline = now() + limit
    while now() < deadline:
        try:
            st = Client.unary(channel, "ClusterStatus", pb.ClusterStatusRequest(), pb.ClusterStatusResponse, timeout=5)
            if st.ready and all(s.health == "serving" for s in st.stages):
                return now()
        except grpc.RpcError:
            pass
        time.sleep(0.1)
    return None


def restarter(cluster, restarts, every, deadline, stop, failures, log):
    channel = grpc.insecure_channel(cluster.address)
    n = 0
    try:
        while True:
            at = restarts.t0 + every * (n + 1)
            if at > deadline - 20 or stop.wait(max(0.0, at - now())):
                return  # no restart too close to the end: its recovery would overlap the final checks
            worker = n % WORKERS
            n += 1
            w = restarts.begin(worker)
            try:
                cluster.kill_worker(worker)
                time.sleep(1.0)  # let the coordinator notice: in-flight sequences wait for the replacement
                cluster.start_worker(worker)
                w[2] = now()
                ready = wait_ready(channel, 90)
            except (ProcessError, RuntimeError) as e:
                failures.append(f"restart of worker{worker}: {e}")
                ready = None
            with restarts.lock:
                w[3] = ready if ready is not None else now()
            if ready is None:
                failures.append(f"the pipeline was not serving again within 90s of restarting worker{worker}")
                stop.set()
                return
            log(f"  restarted worker{worker} at {w[1] - restarts.t0:.0f}s: listening after {w[2] - w[1]:.1f}s, "
                f"serving after {ready - w[1]:.1f}s")
    finally:
        channel.close()


# ------------------------------------------------------------------------------------------------------
# Reports
# ------------------------------------------------------------------------------------------------------

def rss_report(cluster, t0, warmup, bound_mb):
    """Rows of figures per incarnation and the list of failures."""
    rows, failures = [], []
    for inc in cluster.incarnations:
        start = max(inc.started, t0)
        post = [(t, kb) for t, kb in inc.samples if t >= start + warmup]
        life = f"{inc.started - t0:.0f}s..{(inc.ended if inc.ended else now()) - t0:.0f}s"
        if len(post) < 6:
            rows.append((inc.name, inc.number, life, len(post), None, None, None, None, None, None,
                         "short (no check)"))
            continue
        span = post[-1][0] - post[0][0]
        kbs = [kb for _, kb in post]
        if span < 60:
            rows.append((inc.name, inc.number, life, len(post), min(kbs), max(kbs), kbs[-1], None, None, None,
                         "short (no check)"))
            continue
        window = min(60.0, span / 3)
        first = statistics.median(kb for t, kb in post if t <= post[0][0] + window)
        last = statistics.median(kb for t, kb in post if t >= post[-1][0] - window)
        growth = (last - first) / 1024
        verdict = "ok" if growth <= bound_mb else f"GROWTH > {bound_mb:g} MB"
        if growth > bound_mb:
            failures.append(f"{inc.name}#{inc.number}: RSS grew {growth:.1f} MB after warm-up "
                            f"(median {first / 1024:.1f} -> {last / 1024:.1f} MB)")
        rows.append((inc.name, inc.number, life, len(post), min(kbs), max(kbs), kbs[-1], first, last, growth,
                     verdict))
    return rows, failures


def mb(kb):
    return "-" if kb is None else f"{kb / 1024:.1f}"


def print_summary(args, t0, t_end, ledger, restarts, cluster, rss_rows, final_notes, failures):
    p = print
    p("")
    p("=" * 100)
    p(f"soak summary: {(t_end - t0) / 60:.1f} min of load, {args.clients} clients, {WORKERS} workers x "
      f"{args.worker_threads} thread, precision {args.precision}, seed {args.seed}, restart every "
      f"{args.restart_every:g}s" + (f", mix {args.mix}" if args.mix else ""))
    p("=" * 100)
    kinds = [k for k, _ in Client.MIX]
    p(f"{'requests':<16}" + "".join(f"{o:>16}" for o in OUTCOMES) + f"{'total':>10}")
    totals = collections.Counter()
    for k in kinds:
        row = [ledger.outcomes[(k, o)] for o in OUTCOMES]
        for o, n in zip(OUTCOMES, row):
            totals[o] += n
        p(f"{k:<16}" + "".join(f"{n:>16}" for n in row) + f"{sum(row):>10}")
    p(f"{'all':<16}" + "".join(f"{totals[o]:>16}" for o in OUTCOMES) + f"{sum(totals.values()):>10}")
    minutes = max((t_end - t0) / 60, 1e-9)
    served = totals["completed"] + totals["cancelled"] + totals["disconnected"]
    p(f"served {served} requests ({served / minutes:.0f}/min), {ledger.tokens} tokens by gen_full "
      f"({ledger.tokens / (t_end - t0):.0f}/s)")
    p("")
    p("gRPC status by RPC:")
    by_code = collections.Counter()
    for (rpc, code), n in sorted(ledger.codes.items()):
        by_code[code] += n
    for rpc in sorted({r for r, _ in ledger.codes}):
        p(f"  {rpc:<24}" + ", ".join(f"{c} {n}" for (r, c), n in sorted(ledger.codes.items()) if r == rpc))
    p("  all: " + ", ".join(f"{c} {n}" for c, n in sorted(by_code.items())))
    for code, msgs in sorted(ledger.code_messages.items()):
        for m in msgs:
            p(f"    {code}: {m[:160]}")
    p("")
    p(f"exactness: {sum(ledger.compared.values())} outputs held to their reference "
      f"({', '.join(f'{k} {n}' for k, n in sorted(ledger.compared.items()))}); {len(ledger.mismatches)} mismatches")
    for m in ledger.mismatches[:10]:
        p(f"  MISMATCH {m}")
    p(f"lost requests: {len(ledger.lost)}")
    for m in ledger.lost[:10]:
        p(f"  LOST {m}")
    p(f"unexpected errors: {len(ledger.unexpected)}")
    for m in ledger.unexpected[:10]:
        p(f"  ERROR {m}")
    if ledger.soak_errors:
        p(f"errors of the soak script itself: {len(ledger.soak_errors)}")
        for m in ledger.soak_errors[:3]:
            p("  " + m.replace("\n", "\n  "))
    p("")
    p(f"restarts: {len(restarts.windows)}")
    for worker, killed, listening, ready in restarts.windows:
        p(f"  worker{worker} killed at {killed - t0:6.0f}s, listening +{(listening or killed) - killed:.1f}s, "
          f"pipeline serving +{(ready or killed) - killed:.1f}s")
    for note in final_notes:
        p(note)
    p("")
    p(f"RSS (MB) after the {args.warmup:g}s warm-up; growth = median of the last minute - median of the first")
    p(f"  {'process':<12}{'#':>3}{'lifetime':>14}{'samples':>9}{'min':>9}{'max':>9}{'last':>9}{'first-med':>11}"
      f"{'last-med':>10}{'growth':>9}  verdict")
    for name, number, life, n, lo, hi, last, fm, lm, growth, verdict in rss_rows:
        g = "-" if growth is None else f"{growth:+.1f}"
        p(f"  {name:<12}{number:>3}{life:>14}{n:>9}{mb(lo):>9}{mb(hi):>9}{mb(last):>9}{mb(fm):>11}{mb(lm):>10}"
          f"{g:>9}  {verdict}")
    p("")
    if failures:
        p("RESULT: FAIL")
        for f in failures:
            p(f"  - {f}")
    else:
        p("RESULT: PASS")
    sys.stdout.flush()


# ------------------------------------------------------------------------------------------------------
# Main
# ------------------------------------------------------------------------------------------------------

def record_references(channel, gen, long, score_inputs):
    """Each fixed request's output, recorded on the idle cluster (asked twice: it must agree with itself)."""
    for spec in gen + long:
        runs = []
        for _ in range(2):
            ids, final = read_stream(Client.generate_call(channel)(spec.request(), timeout=RPC_TIMEOUT))
            check_final(spec, ids, final)
            runs.append(ids)
        if runs[0] != runs[1]:
            raise RuntimeError(f"{spec.key}: two runs on the idle cluster differ: {runs[0]} vs {runs[1]}")
        spec.ref = runs[0]
    scores = []
    for ids in score_inputs:
        resp = Client.unary(channel, "Score", pb.ScoreRequest(ids=pb.TokenIds(ids=ids)), pb.ScoreResponse,
                            timeout=RPC_TIMEOUT)
        scores.append((ids, list(resp.logprobs)))
    return scores


def retention_seconds(text):
    """--job-retention as seconds ("120s", "5m", "1h"; an absl duration of one unit)."""
    units = {"s": 1, "m": 60, "h": 3600}
    return float(text[:-1]) * units[text[-1]] if text and text[-1] in units else float("inf")


def final_sweep(channel, ledger, limit, retention=float("inf")):
    """Every submitted job must end: (notes, failures). A job the coordinator no longer knows, submitted
    longer ago than the retention, ended and expired (the coordinator removes only ended jobs)."""
    notes, failures = [], []
    deadline = now() + limit
    with ledger.lock:
        jobs = dict(ledger.jobs)
    states = collections.Counter()
    pending = set(jobs)
    last = {}
    while pending and now() < deadline:
        for job in sorted(pending):
            try:
                info = Client.unary(channel, "GetJob", pb.GetJobRequest(job_id=job), pb.JobInfo)
            except grpc.RpcError as e:
                last[job] = f"GetJob: {e.code().name}: {e.details()}"
                if e.code() == grpc.StatusCode.NOT_FOUND and now() - jobs[job]["submitted"] > retention:
                    pending.discard(job)
                    states["EXPIRED (ended, then past --job-retention)"] += 1
                continue
            last[job] = pb.JobState.Name(info.state)
            if info.state in TERMINAL:
                pending.discard(job)
                states[pb.JobState.Name(info.state)] += 1
                meta = jobs[job]
                spec = meta["spec"]
                got = list(info.ids)
                if info.state == pb.JOB_SUCCEEDED:
                    ledger.compare("job_sweep", got == spec.ref, f"{spec.key} job {job}: got {got[:12]}... "
                                                                 f"({len(got)}), want {spec.ref[:12]}... ({len(spec.ref)})")
                elif info.state == pb.JOB_CANCELLED:
                    if not meta["cancel"]:
                        failures.append(f"job {job} ({spec.key}) CANCELLED though nobody cancelled it")
                    ledger.compare("job_sweep", got == spec.ref[:len(got)], f"{spec.key} job {job}: cancelled prefix "
                                                                            f"{got[:12]} is not the reference's")
                else:
                    failures.append(f"job {job} ({spec.key}) ended {pb.JobState.Name(info.state)}: {info.error}")
        if pending:
            time.sleep(0.5)
    for job in sorted(pending):
        ledger.outcome("job_sweep", "lost", f"job {job} not terminal {limit}s after the load: {last.get(job)}")
    notes.append(f"jobs: {len(jobs)} submitted; final states " + ", ".join(f"{s} {n}" for s, n in sorted(states.items()))
                 + f"; {len(pending)} never terminal")
    try:
        listed = Client.unary(channel, "ListJobs", pb.ListJobsRequest(), pb.ListJobsResponse)
        notes.append(f"ListJobs: the coordinator holds {len(listed.jobs)} jobs with "
                     f"{sum(j.generated_tokens for j in listed.jobs)} generated tokens (finished jobs are never evicted)")
        unknown = {j.job_id for j in listed.jobs} - set(jobs)
        if unknown:
            failures.append(f"ListJobs lists {len(unknown)} jobs nobody submitted")
    except grpc.RpcError as e:
        failures.append(f"ListJobs after the load: {e.code().name}: {e.details()}")
    return notes, failures


def wait_idle(channel, limit):
    """The coordinator with nothing running or queued and no KV held: (note, failure or None)."""
    deadline = now() + limit
    st = None
    while now() < deadline:
        try:
            st = Client.unary(channel, "ClusterStatus", pb.ClusterStatusRequest(), pb.ClusterStatusResponse)
            if (st.ready and st.running_sequences == 0 and st.queued_requests == 0
                    and all(s.kv_bytes_used == 0 and s.sequences == 0 for s in st.stages)):
                return "idle after the load: no sequence running or queued, no KV held on any stage", None
        except grpc.RpcError:
            pass
        time.sleep(0.5)
    if st is None:
        return "", "ClusterStatus did not answer after the load"
    return "", (f"not idle {limit}s after the load: ready {st.ready}, {st.running_sequences} running, "
                f"{st.queued_requests} queued, stages " +
                ", ".join(f"{s.stage}: {s.sequences} seqs {s.kv_bytes_used} B KV" for s in st.stages))


def main():
    global pb, TERMINAL
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "bin"))
    ap.add_argument("--minutes", type=float, default=10, help="how long the load runs (default 10)")
    ap.add_argument("--clients", type=int, default=4, help="client threads (default 4)")
    ap.add_argument("--restart-every", type=float, default=180, help="seconds between worker restarts (default 180; "
                    "0: none)")
    ap.add_argument("--work", default=None, help="parent of this run's scratch directory (default: the system's)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory (logs, checkpoint)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--job-retention", default="120s",
                    help="the coordinator's --job-retention (default 120s: ended jobs then leave memory during the run)")
    ap.add_argument("--rss-bound-mb", type=float, default=64, help="allowed RSS growth per process after the "
                    "warm-up (default 64)")
    ap.add_argument("--warmup", type=float, default=60, help="seconds before RSS growth counts (default 60)")
    ap.add_argument("--rss-interval", type=float, default=2.0, help="seconds between RSS samples (default 2)")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--worker-threads", type=int, default=1)
    ap.add_argument("--score-tol", type=float, default=1e-4, help="allowed logprob difference from the reference")
    ap.add_argument("--mix", default="", help="request weights to change, e.g. job_orphan=0,score=30 (kinds: " +
                    ", ".join(f"{k} {w}" for k, w in Client.MIX) + ")")
    args = ap.parse_args()
    weights = dict(Client.MIX)
    for item in filter(None, args.mix.split(",")):
        kind, _, w = item.partition("=")
        if kind not in weights or not w.replace(".", "", 1).isdigit():
            sys.exit(f"--mix: bad item {item!r}")
        weights[kind] = float(w)
    mix = [(k, w) for k, w in weights.items() if w > 0]
    if not mix:
        sys.exit("--mix leaves no request kind")

    pb = load_layerpipe_pb2(REPO)
    TERMINAL = {pb.JOB_SUCCEEDED, pb.JOB_FAILED, pb.JOB_CANCELLED}
    bin_dir = os.path.abspath(args.bin)
    for name in ["layerpipe", "layerpipe-worker", "layerpipe-coordinator"]:
        if not os.access(os.path.join(bin_dir, name), os.X_OK):
            sys.exit(f"{bin_dir}/{name} is missing")
    if args.work:
        os.makedirs(args.work, exist_ok=True)
    work = tempfile.mkdtemp(prefix="soak_", dir=args.work)
    logs = os.path.join(work, "logs")
    os.makedirs(logs)

    def log(msg):
        print(msg, flush=True)

    # SIGTERM ends the run as Ctrl-C does: through the finally below.
    def on_sigterm(*_):
        raise KeyboardInterrupt()

    signal.signal(signal.SIGTERM, on_sigterm)
    cluster = None
    stop = threading.Event()
    failures = []
    ok = False
    try:
        model = os.path.join(work, "model")
        subprocess.run(small_checkpoint_argv(os.path.join(bin_dir, "layerpipe"), model, seed=args.seed,
                                             max_positions=MAX_POSITIONS),
                       check=True, stdout=subprocess.DEVNULL)
        # Ended jobs stay readable for --job-retention (24 h by default): a run longer than that retention
        # would count them as growth, so the soak keeps them for a short time and its RSS measures leaks.
        cluster = Cluster(bin_dir, model, logs, args.precision, args.worker_threads,
                          coordinator_flags=[f"--job-retention={args.job_retention}"])
        log(f"cluster: coordinator {cluster.address}, workers {', '.join(cluster.addresses)}; logs in {logs}")
        channel = grpc.insecure_channel(cluster.address)
        rng = random.Random(args.seed)
        gen, long, score_inputs = make_specs(rng)
        scores = record_references(channel, gen, long, score_inputs)
        log(f"references: {len(gen) + len(long)} generations "
            f"({sum(len(s.ref) for s in gen + long)} tokens), {len(scores)} scores")

        restarts = Restarts()
        ledger = Ledger(restarts)
        t0 = restarts.t0 = now()
        deadline = t0 + args.minutes * 60
        for inc in cluster.incarnations:
            inc.samples.clear()  # the series start with the load
        threads = [threading.Thread(target=rss_sampler, args=(cluster, stop, args.rss_interval), daemon=True)]
        client = Client(cluster.address, ledger, gen, long, scores, args.score_tol)
        clients = [threading.Thread(target=client.loop, args=(i, args.seed, deadline, stop, mix), daemon=True)
                   for i in range(args.clients)]
        if args.restart_every > 0:
            threads.append(threading.Thread(target=restarter, daemon=True, args=(
                cluster, restarts, args.restart_every, deadline, stop, failures, log)))
        for t in threads + clients:
            t.start()
        log(f"load: {args.clients} clients for {args.minutes:g} min, a worker restart every "
            f"{args.restart_every:g}s")
        next_report = t0 + 60
        while now() < deadline and not stop.is_set():
            time.sleep(min(1.0, max(0.0, deadline - now())))
            dead = cluster.dead_unexpectedly()
            if dead:
                for inc in dead:
                    failures.append(f"{inc.name}#{inc.number} exited on its own (status {inc.proc.popen.poll()})"
                                    f"\n{inc.proc.tail()}")
                stop.set()
            if now() >= next_report:
                next_report += 60
                with ledger.lock:
                    done = sum(n for (k, o), n in ledger.outcomes.items())
                    bad = len(ledger.mismatches) + len(ledger.lost) + len(ledger.unexpected)
                rss = ", ".join(f"{i.name} {mb(i.samples[-1][1] if i.samples else None)}" for i in cluster.live())
                log(f"  {(now() - t0) / 60:4.1f} min: {done} requests, {bad} problems; RSS MB {rss}")
        t_end = now()
        for t in clients:
            t.join(RPC_TIMEOUT + 60)
        stuck = sum(t.is_alive() for t in clients)
        if stuck:
            failures.append(f"{stuck} client threads still busy {RPC_TIMEOUT + 60}s after the deadline")
        stop.set()
        for t in threads:
            t.join(120)
        notes, sweep_failures = final_sweep(channel, ledger, RPC_TIMEOUT, retention_seconds(args.job_retention))
        failures += sweep_failures
        idle_note, idle_failure = wait_idle(channel, 60)
        if idle_note:
            notes.append(idle_note)
        if idle_failure:
            failures.append(idle_failure)
        coord_err = cluster.current["coordinator"].proc.stderr_text()
        notes.append(f"coordinator log: {coord_err.count('pipeline fault')} pipeline faults, "
                     f"{coord_err.count('pipeline restored')} recoveries")
        channel.close()

        rss_rows, rss_failures = rss_report(cluster, t0, args.warmup, args.rss_bound_mb)
        failures += rss_failures
        coord = next(r for r in rss_rows if r[0] == "coordinator")
        with ledger.lock:
            n_jobs = len(ledger.jobs)
        if coord[9] is not None and n_jobs:
            # Jobs are kept for GetJob/StreamJob after they end: the coordinator's growth per job says
            # whether that retention accounts for it.
            notes.append(f"coordinator RSS growth per submitted job: {coord[9] * 1024 / n_jobs:.1f} kB "
                         f"({coord[9]:+.1f} MB, {n_jobs} jobs)")
        if ledger.mismatches:
            failures.append(f"{len(ledger.mismatches)} outputs differ from their reference")
        if ledger.lost:
            failures.append(f"{len(ledger.lost)} requests lost")
        if ledger.unexpected:
            failures.append(f"{len(ledger.unexpected)} unexpected errors")
        if ledger.soak_errors:
            failures.append(f"{len(ledger.soak_errors)} exceptions in the soak script")
        print_summary(args, t0, t_end, ledger, restarts, cluster, rss_rows, notes, failures)
        ok = not failures
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
    finally:
        stop.set()
        if cluster is not None:
            cluster.close()
        if ok and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"logs kept in {logs}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
