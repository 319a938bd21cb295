#!/usr/bin/env python3
"""deploy/mpirun.sh under a real mpirun, and a static check of deploy/slurm/layerpipe.sbatch.

1. A 3-rank job (coordinator + 2 workers) on a generated checkpoint runs `generate` as its client command;
   its ids must equal the local engine's, mpirun must exit 0, and no server it started may outlive it.
2. A 1-rank job (no workers) must fail with a message saying why.
3. The sbatch script parses (bash -n), launches deploy/mpirun.sh, and passes it only options mpirun.sh
   accepts; the worker and coordinator flags mpirun.sh passes on exist in the binaries' --helpfull.
"""
import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from proc_harness import small_checkpoint_argv  # noqa: E402

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def free_base_port(count):
    """A port P such that P..P+count-1 are all free now (the coordinator takes P, worker r takes P+r)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("0.0.0.0", 0))
            base = s.getsockname()[1]
        if base + count > 65535:
            continue
        socks = []
        try:
            for p in range(base, base + count):
                s = socket.socket()
                socks.append(s)
                s.bind(("0.0.0.0", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no run of free ports found")


def servers_using(model):
    """Pids of layerpipe servers whose command line names this test's private model directory."""
    out = subprocess.run(["pgrep", "-f", "layerpipe-(worker|coordinator) .*" + re.escape(model)],
                         capture_output=True, text=True).stdout
    return set(out.split())


def last_ids_line(text):
    lines = [l for l in text.splitlines() if re.fullmatch(r"\d+(,\d+)*", l.strip())]
    return lines[-1].strip() if lines else None


def mpirun_cmd(src, np, model, port, rendezvous, client):
    return (["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(np),
             os.path.join(src, "deploy", "mpirun.sh"), "--model", model, "--base-port", str(port),
             "--rendezvous", rendezvous, "--threads", "1"] + (["--"] + client if client else []))


def run_cluster(src, bindir, work):
    model = os.path.join(work, "ckpt")
    subprocess.run(small_checkpoint_argv(os.path.join(bindir, "layerpipe"), model, seed=4), check=True,
                   capture_output=True)
    client = ["generate", "--ids", "2,5,6,7", "--max-new-tokens", "12", "--print-ids"]
    local = subprocess.run([os.path.join(bindir, "layerpipe")] + client[:1] + ["--model", model] + client[1:],
                           capture_output=True, text=True, timeout=60)
    expected = last_ids_line(local.stdout)
    check(local.returncode == 0 and expected is not None, f"local engine generates ids ({expected})")

    env = dict(os.environ, LAYERPIPE_BIN=bindir)
    before = servers_using(model)
    rendezvous = os.path.join(work, "rendezvous")
    port = free_base_port(3)
    start = time.monotonic()
    p = subprocess.run(mpirun_cmd(src, 3, model, port, rendezvous, client), capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, env=env, timeout=240)
    took = time.monotonic() - start
    got = last_ids_line(p.stdout)
    check(p.returncode == 0, f"mpirun -np 3 exits 0 (status {p.returncode}, {took:.1f}s)")
    check(got == expected, f"cluster ids {got} equal the local engine's {expected}")
    if p.returncode != 0 or got != expected:
        print("--- stdout:\n" + p.stdout + "\n--- stderr:\n" + p.stderr)
    check(any(n.startswith("worker-") for d in os.listdir(rendezvous) for n in os.listdir(os.path.join(rendezvous, d))),
          "workers published their addresses in the rendezvous directory")
    # mpirun waits for every rank, and each rank waits for its server; allow the kernel a moment to reap.
    deadline = time.monotonic() + 10
    while servers_using(model) - before and time.monotonic() < deadline:
        time.sleep(0.2)
    left = servers_using(model) - before
    check(not left, f"no layerpipe server outlives the job (left: {sorted(left)})")
    for pid in left:  # do not leak them into the rest of the test run
        subprocess.run(["kill", "-KILL", pid])

    p = subprocess.run(mpirun_cmd(src, 1, model, free_base_port(1), rendezvous, client), capture_output=True,
                       text=True, stdin=subprocess.DEVNULL, env=env, timeout=60)
    check(p.returncode != 0, f"mpirun -np 1 fails (status {p.returncode})")
    check("needs at least 2 ranks" in p.stderr, "and says it needs at least 2 ranks")
    check(not (servers_using(model) - before), "and starts no server")


def mpirun_sh_options(src):
    text = open(os.path.join(src, "deploy", "mpirun.sh")).read()
    return set(re.findall(r"^\s+(--[a-z-]+)\)", text, re.M))


def server_flags(bindir, name):
    out = subprocess.run([os.path.join(bindir, name), "--helpfull"], capture_output=True, text=True)
    return {"--" + f.replace("_", "-") for f in re.findall(r"^\s+--([a-z_]+) \(", out.stdout + out.stderr, re.M)}


def static_checks(src, bindir):
    sbatch = os.path.join(src, "deploy", "slurm", "layerpipe.sbatch")
    mpirun_sh = os.path.join(src, "deploy", "mpirun.sh")
    for f in (sbatch, mpirun_sh):
        p = subprocess.run(["bash", "-n", f], capture_output=True, text=True)
        check(p.returncode == 0, f"bash -n {os.path.relpath(f, src)} {p.stderr.strip()}")
    check(os.access(mpirun_sh, os.X_OK), "deploy/mpirun.sh is executable")
    text = open(sbatch).read()
    check("deploy/mpirun.sh" in text, "the sbatch script launches deploy/mpirun.sh")
    check(re.search(r"^#SBATCH --ntasks-per-node=1$", text, re.M) is not None, "one task per node")
    check(re.search(r"^#SBATCH --nodes=\d+$", text, re.M) and re.search(r"^#SBATCH --time=", text, re.M),
          "it sets --nodes and --time")
    check(re.search(r"^# #SBATCH --gres=gpu:1", text, re.M) is not None, "it carries the --gres=gpu:1 line, commented")
    # Options the sbatch passes to mpirun.sh: every --word inside its args=(...) lines.
    args_block = "\n".join(re.findall(r"args(?:\+)?=\((.*?)\)", text, re.S))
    passed = set(re.findall(r"(--[a-z-]+)", args_block))
    known = mpirun_sh_options(src)
    check(passed and passed <= known, f"sbatch passes only mpirun.sh options {sorted(passed)} (unknown: {sorted(passed - known)})")
    # Flags mpirun.sh hands to each server must exist there.
    script = open(mpirun_sh).read()
    for binary, func in (("layerpipe-worker", "run_worker"), ("layerpipe-coordinator", "run_coordinator")):
        body = script[script.index(func + "() {"):]
        body = body[:body.index("\n}\n")]
        used = set(re.findall(r"(?:args=\(|args\+=\(|\s)(--[a-z-]+) \"", body)) - {"--coordinator"}
        have = server_flags(bindir, binary)
        check(used and used <= have, f"{binary} accepts {sorted(used)} (unknown: {sorted(used - have)})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", default=None)
    a = ap.parse_args()
    src, bindir = os.path.abspath(a.src), os.path.abspath(a.bin)
    static_checks(src, bindir)
    if shutil.which("mpirun") is None:
        check(False, "mpirun is installed (apt-get install openmpi-bin; scripts/install_deps.sh does)")
    else:
        work = a.work or tempfile.mkdtemp(prefix="layerpipe-launch-")
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        run_cluster(src, bindir, os.path.abspath(work))
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
