#!/usr/bin/env python3
"""--help and --version of every layerpipe program.

The servers' --help exits 0 and lists every flag the program takes (the same names as absl's --helpfull,
less absl's own), whichever file defines it; --version (the servers' and the CLI's) exits 0 and prints
"PROGRAM VERSION (git COMMIT)" with the version of project() in CMakeLists.txt.
"""
import argparse
import os
import re
import subprocess
import sys

failures = []

ABSL_FLAGS = {"flagfile", "fromenv", "tryfromenv", "undefok", "help", "helpfull", "helpshort", "helppackage",
              "version", "only_check_args", "helpon", "helpmatch", "help_format"}
# A few flags each server must list, from each file that defines its flags.
EXPECTED = {
    "layerpipe-worker": {"listen", "kv-budget", "device", "tls-ca"},
    "layerpipe-coordinator": {"listen", "workers", "auth-tokens",  # coordinator/main.cc
                              "model", "layer-split", "drain-timeout"},  # coordinator/coordinator_flags.cc
    "layerpipe-mpi": {"worker-listen", "mpi-poll-us", "model", "prefill-chunk"},
}


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def run(argv):
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)


def project_version(src):
    m = re.search(r"project\(layerpipe\s+VERSION\s+(\d+\.\d+\.\d+)", open(os.path.join(src, "CMakeLists.txt")).read())
    return m.group(1) if m else None


def check_version(exe, version):
    name = os.path.basename(exe)
    p = run([exe, "--version"])
    line = p.stdout.strip()
    check(p.returncode == 0, f"{name} --version exits 0 ({p.returncode})")
    check(re.fullmatch(rf"{re.escape(name)} {re.escape(version)} \(git ([0-9a-f]{{4,}}|unknown)\)", line) is not None,
          f"{name} --version says '{line}' (want '{name} {version} (git COMMIT)')")


def check_help(exe):
    name = os.path.basename(exe)
    p = run([exe, "--help"])
    check(p.returncode == 0, f"{name} --help exits 0 ({p.returncode})")
    listed = set(re.findall(r"^\s+--([a-z0-9][a-z0-9-]*) \(", p.stdout, re.M))
    check(EXPECTED[name] <= listed, f"{name} --help lists {sorted(EXPECTED[name])} (missing: "
                                    f"{sorted(EXPECTED[name] - listed)})")
    full = run([exe, "--helpfull"])
    every = {f.replace("_", "-") for f in re.findall(r"^\s+--([a-z0-9_]+) \(", full.stdout + full.stderr, re.M)}
    own = every - {f.replace("_", "-") for f in ABSL_FLAGS}
    check(own and listed == own, f"{name} --help lists every flag of --helpfull but absl's (only in --helpfull: "
                                 f"{sorted(own - listed)}; only in --help: {sorted(listed - own)})")
    check(bool(p.stdout) and name in p.stdout.splitlines()[0], f"{name} --help starts with its usage line")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    ap.add_argument("--bin", required=True)
    a = ap.parse_args()
    version = project_version(a.src)
    check(version is not None, f"CMakeLists.txt sets project(layerpipe VERSION x.y.z) ({version})")
    for name in ("layerpipe-worker", "layerpipe-coordinator", "layerpipe-mpi"):
        exe = os.path.join(a.bin, name)
        if not os.path.exists(exe):
            print(f"skip {name}: not built")
            continue
        check_help(exe)
        check_version(exe, version or "")
    check_version(os.path.join(a.bin, "layerpipe"), version or "")
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
