#!/usr/bin/env python3
"""layerpipe-mpi under a real mpirun: one MPI job is the whole cluster.

1. `mpirun -np 3 layerpipe-mpi ... -- generate ...` (coordinator + 2 workers, the client command run by
   rank 0) on a generated checkpoint: the ids must equal the single-process engine's, the frames between
   the two worker ranks must have gone over MPI (each side's count, and the worker's Status RPC), mpirun
   must exit 0 and no rank may outlive it.
2. Serving without a client command: a client reaches the printed address and gets the same ids, idle
   ranks do not spin a core, and SIGTERM to one worker rank stops every rank with status 0.
3. A worker rank killed with SIGKILL ends the job with a failure status instead of hanging it.
4. -np 1 (no workers) and an empty client command fail and say why; a worker rank that cannot start (a
   device the build lacks) fails the whole job and names the rank.
"""
import argparse
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from proc_harness import Process, ProcessError, small_checkpoint_argv  # noqa: E402

failures = []
PROMPT = "2,5,6,7,9,11,13,3,4,8,10"  # 11 tokens: longer than the checkpoint's window of 8
NEW_TOKENS = "12"


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def last_ids_line(text):
    lines = [l for l in text.splitlines() if re.fullmatch(r"\d+(,\d+)*", l.strip())]
    return lines[-1].strip() if lines else None


def ranks_of(model):
    """{pid: rank} of the layerpipe-mpi processes whose command line names this test's model."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() != "layerpipe-mpi":
                    continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if model.encode() not in f.read():
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            found[int(pid)] = int(env.get(b"OMPI_COMM_WORLD_RANK", b"-1"))
        except (OSError, ValueError):
            continue
    return found


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_gone(model, seconds):
    deadline = time.monotonic() + seconds
    while ranks_of(model) and time.monotonic() < deadline:
        time.sleep(0.1)
    return ranks_of(model)


def kill_leftovers(model):
    for pid in ranks_of(model):
        os.kill(pid, signal.SIGKILL)


def mpirun(bindir, np, model, extra=(), client=()):
    return (["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(np),
             os.path.join(bindir, "layerpipe-mpi"), "--model", model, "--threads", "1"] + list(extra) +
            (["--"] + list(client) if client else []))


def rank_log(rank):
    """A regex for the start of a log line's message from `rank` (common/log.h: the program is named
    layerpipe-mpi[rank N])."""
    return rf"layerpipe-mpi\[rank {rank}\]\] "


def frames_over_mpi(stderr, rank):
    m = re.search(rf"{rank_log(rank)}stopped; frames over mpi: (\d+) sent, (\d+) received", stderr)
    return (int(m.group(1)), int(m.group(2))) if m else None


def worker_status(src, address):
    import grpc
    from pb_loader import load_internal_pb2
    pb = load_internal_pb2(src)
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary("/layerpipe.internal.v1.Worker/Status",
                                   request_serializer=pb.WorkerStatusRequest.SerializeToString,
                                   response_deserializer=pb.WorkerStatus.FromString)
        return call(pb.WorkerStatusRequest(), timeout=10)


def client_command_job(bindir, model, expected):
    client = ["generate", "--ids", PROMPT, "--max-new-tokens", NEW_TOKENS, "--print-ids"]
    start = time.monotonic()
    p = subprocess.run(mpirun(bindir, 3, model, client=client), capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=120)
    took = time.monotonic() - start
    got = last_ids_line(p.stdout)
    check(p.returncode == 0, f"mpirun -np 3 layerpipe-mpi -- generate exits 0 (status {p.returncode}, {took:.1f}s)")
    check(got == expected, f"its ids {got} equal the single-process engine's {expected}")
    check(re.search(rf"{rank_log(1)}stage 0 hands frames to \S+ over mpi \(rank 2\)", p.stderr) is not None,
          "rank 1 (stage 0) chose the MPI hop to rank 2")
    sent, recv = frames_over_mpi(p.stderr, 1), frames_over_mpi(p.stderr, 2)
    check(sent is not None and recv is not None and sent[0] > 0 and sent[0] == recv[1],
          f"frames went over MPI: rank 1 sent {sent and sent[0]}, rank 2 received {recv and recv[1]}")
    if p.returncode != 0 or got != expected:
        print("--- stdout:\n" + p.stdout + "\n--- stderr:\n" + p.stderr)
    left = wait_gone(model, 10)
    check(not left, f"no rank outlives the job (left: {sorted(left)})")
    kill_leftovers(model)


def first_line(p):
    """The first line p prints on stdout, however long that takes (what is there if stdout closes first)."""
    try:
        return p.wait_output(lambda out: out[:out.index(b"\n") + 1] if b"\n" in out else None, None,
                             "a line").decode(errors="replace")
    except ProcessError:
        return p.stdout_text()


def serving_job(src, bindir, model, expected):
    p = Process(mpirun(bindir, 3, model), "mpirun")
    try:
        try:
            address = p.wait_for(r"(?m)^layerpipe-mpi listening on (\S+)", 60).group(1)
        except ProcessError as e:
            address = None
            print(e)
        check(address is not None, f"serving, rank 0 prints its address ({address})")
        if address is None:
            return
        c = subprocess.run([os.path.join(bindir, "layerpipe"), "generate", "--coordinator", address, "--ids",
                            PROMPT, "--max-new-tokens", NEW_TOKENS, "--print-ids"],
                           capture_output=True, text=True, timeout=60)
        got = last_ids_line(c.stdout)
        check(c.returncode == 0 and got == expected, f"a client of the serving job gets {got} (want {expected})")

        ranks = ranks_of(model)
        check(sorted(ranks.values()) == [0, 1, 2], f"three ranks run ({sorted(ranks.values())})")
        # Idle ranks wait for messages by polling with sleeps; one that spun would use a whole core.
        before = {pid: cpu_seconds(pid) for pid in ranks}
        time.sleep(3)
        used = {ranks[pid]: (cpu_seconds(pid) - before[pid]) / 3 for pid in ranks}
        print("idle CPU per rank (cores): " + ", ".join(f"rank {r}: {u:.3f}" for r, u in sorted(used.items())))
        check(max(used.values()) < 0.2, "no idle rank keeps a core busy")

        workers = [pid for pid, r in ranks.items() if r == 2]
        os.kill(workers[0], signal.SIGTERM)
        rc = p.wait(60)
        err = p.stderr_text()
        check(rc == 0, f"SIGTERM to worker rank 2 stops the whole job with status 0 ({rc})")
        check(re.search(rf"{rank_log(0)}stopping the job: rank 2 got signal 15", err) is not None,
              "rank 0 stopped it at rank 2's request")
        addresses = re.search(r"workers in rank order: (\S+)", err)
        check(addresses is not None, "rank 0 lists the workers")
        left = wait_gone(model, 10)
        check(not left, f"no rank outlives the job (left: {sorted(left)})")
        if rc != 0:
            print("--- stderr:\n" + err)
    finally:
        p.close()
        kill_leftovers(model)


def status_reports_mpi(src, bindir, model):
    """The first worker's WorkerStatus says its next hop is MPI, the last one's says nothing."""
    p = Process(mpirun(bindir, 3, model), "mpirun")
    try:
        check(first_line(p).startswith("layerpipe-mpi listening on"), "the job serves")
        root = [pid for pid, r in ranks_of(model).items() if r == 0]
        # Rank 0 named the workers on stderr before it listened.
        with contextlib.suppress(ProcessError):
            p.wait_stderr(r"stage 1 at", 30)
        m = re.search(r"workers in rank order: (\S+),(\S+)", p.stderr_text())
        check(m is not None, "rank 0 names the workers")
        if m:
            first, last = worker_status(src, m.group(1)), worker_status(src, m.group(2))
            check(first.next_hop_transport == "mpi", f"stage 0's WorkerStatus: next hop '{first.next_hop_transport}'")
            check(last.next_hop_transport == "", f"the last stage's: '{last.next_hop_transport}' (none)")
        os.kill(root[0], signal.SIGTERM)
        rc = p.wait(60)
        check(rc == 0, f"SIGTERM to rank 0 stops the job with status 0 ({rc})")
    finally:
        p.close()
        kill_leftovers(model)


def worker_crash_job(bindir, model):
    """A worker rank that dies (SIGKILL: no chance to tell rank 0) ends the job instead of hanging it."""
    p = Process(mpirun(bindir, 3, model), "mpirun")
    try:
        check(first_line(p).startswith("layerpipe-mpi listening on"), "the job serves")
        workers = [pid for pid, r in ranks_of(model).items() if r == 2]
        check(len(workers) == 1, "worker rank 2 runs")
        if not workers:
            return
        os.kill(workers[0], signal.SIGKILL)
        with contextlib.suppress(ProcessError):
            p.wait(60)
        rc = p.popen.returncode
        check(rc is not None and rc != 0, f"a worker rank killed by SIGKILL ends the job with a failure status ({rc})")
        left = wait_gone(model, 10)
        check(not left, f"and no rank outlives it (left: {sorted(left)})")
    finally:
        p.close()
        kill_leftovers(model)


def failures_at_start(bindir, model):
    p = subprocess.run(mpirun(bindir, 1, model, client=["generate", "--ids", "2", "--max-new-tokens", "1"]),
                       capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
    check(p.returncode != 0, f"mpirun -np 1 fails (status {p.returncode})")
    check("needs at least 2 ranks" in p.stderr, "and says it needs at least 2 ranks")
    check(not wait_gone(model, 10), "and leaves no rank behind")

    # A client command that names no subcommand is refused by every rank before any worker starts.
    p = subprocess.run(mpirun(bindir, 3, model, client=["layerpipe"]), capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=60)
    check(p.returncode != 0 and "the client command after -- is empty" in p.stderr and
          "did not start" not in p.stderr and "listening on" not in p.stdout,
          f"an empty client command fails at once, saying why (status {p.returncode})")
    check(not wait_gone(model, 10), "and leaves no rank behind")

    p = subprocess.run(mpirun(bindir, 3, model, extra=["--device", "cuda:7"]), capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=60)
    check(p.returncode != 0, f"a job whose workers cannot start fails (status {p.returncode})")
    check(re.search(r"the worker of rank 1 did not start: --device cuda:7", p.stderr) is not None,
          "and rank 0 names the rank and the reason")
    if p.returncode == 0 or "did not start" not in p.stderr:
        print("--- stderr:\n" + p.stderr)
    check(not wait_gone(model, 10), "and leaves no rank behind")
    kill_leftovers(model)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", default=None)
    a = ap.parse_args()
    src, bindir = os.path.abspath(a.src), os.path.abspath(a.bin)
    if shutil.which("mpirun") is None:
        check(False, "mpirun is installed (apt-get install openmpi-bin; scripts/install_deps.sh does)")
        return 1
    work = os.path.abspath(a.work or tempfile.mkdtemp(prefix="layerpipe-mpi-"))
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    model = os.path.join(work, "ckpt")
    subprocess.run(small_checkpoint_argv(os.path.join(bindir, "layerpipe"), model, seed=4), check=True,
                   capture_output=True)
    local = subprocess.run([os.path.join(bindir, "layerpipe"), "generate", "--model", model, "--ids", PROMPT,
                            "--max-new-tokens", NEW_TOKENS, "--print-ids"], capture_output=True, text=True, timeout=60)
    expected = last_ids_line(local.stdout)
    check(local.returncode == 0 and expected is not None, f"the single-process engine generates ids ({expected})")
    client_command_job(bindir, model, expected)
    serving_job(src, bindir, model, expected)
    status_reports_mpi(src, bindir, model)
    worker_crash_job(bindir, model)
    failures_at_start(bindir, model)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
