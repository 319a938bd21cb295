"""The files besides the chart: docker-compose.yml, the systemd units, the Dockerfiles and
deploy/runtime-packages.sh, and docs/deploy.md's sizing tables.

- compose, systemd, Dockerfiles: they parse, name the three binaries and only flags the binaries define, the
  compose --workers list names the worker services at their ports, every compose server exposes and publishes
  (once) its --metrics-listen port, the units' variables (metrics, TLS included) are defined by the shipped
  env files (and systemd-analyze verify passes where it is installed).
- deploy/runtime-packages.sh resolves the built binaries' libraries to packages.
- docs/deploy.md's sizing tables equal what deploy/sizing.py computes from MODEL.md's shapes."""
import importlib
import os
import re
import shutil
import subprocess
import sys
import tempfile

import deploy_files
from deploy_files import interpolate_raises, parse_dockerfile
from flags import flag_value
from util import BINARIES, need, read


def check_compose(ctx):
    doc, _ = deploy_files.compose(ctx)
    need(interpolate_raises(read(ctx.path("deploy", "docker-compose.yml")), {}),
         "LAYERPIPE_MODEL_DIR must be required (${LAYERPIPE_MODEL_DIR:?...})")
    services = doc["services"]
    need({"coordinator", "worker-0", "worker-1"} <= set(services), "compose needs coordinator, worker-0 and worker-1")
    model_mounts = set()
    listen = {}
    metrics_hosts = []
    for name, svc in services.items():
        need(isinstance(svc.get("command"), list), f"{name}: command must be a list")
        program = ctx.programs.check_argv(svc["command"], f"compose {name}")
        build = svc.get("build", {})
        need(os.path.isfile(os.path.join(ctx.path("deploy"), build.get("context", "."), build.get("dockerfile", ""))),
             f"{name}: build.dockerfile does not exist")
        mounts = [v for v in svc.get("volumes", []) if v.split(":")[0] == "model"]
        need(len(mounts) == 1 and mounts[0].endswith(":ro"), f"{name}: the model volume must be mounted read-only")
        model_mounts.add(mounts[0].split(":")[1])
        for dep in svc.get("depends_on", {}):
            need(dep in services, f"{name}: depends_on {dep} is not a service")
        if program in ("layerpipe-worker", "layerpipe-coordinator"):
            need(flag_value(svc["command"], "model") == mounts[0].split(":")[1], f"{name}: --model is not the model mount")
            need(svc.get("healthcheck", {}).get("test"), f"{name}: no healthcheck")
            test = svc["healthcheck"]["test"]
            need(test[0] == "CMD", f"{name}: healthcheck must be a CMD list")
            if test[1] == "layerpipe":
                ctx.programs.check_argv(test[1:], f"compose {name} healthcheck")
        if program in ("layerpipe-worker", "layerpipe-coordinator"):
            # Metrics: every server serves them, on the port it exposes and publishes (once per host port).
            mlisten = flag_value(svc["command"], "metrics-listen")
            need(mlisten and re.fullmatch(r"0\.0\.0\.0:\d+", mlisten), f"{name}: --metrics-listen must be 0.0.0.0:PORT, not {mlisten!r}")
            mport = mlisten.rsplit(":", 1)[1]
            need(mport in [str(e) for e in svc.get("expose", [])], f"{name}: does not expose its metrics port {mport}")
            published = [str(p).rsplit(":", 1) for p in svc.get("ports", [])]
            hosts = [h for h, ctr in published if ctr == mport]
            need(len(hosts) == 1, f"{name}: the metrics port {mport} is not published once: {svc.get('ports')}")
            metrics_hosts.append(hosts[0])
        if program == "layerpipe-worker":
            listen[name] = flag_value(svc["command"], "listen").rsplit(":", 1)[1]
            need(f"/dev/tcp/127.0.0.1/{listen[name]}" in " ".join(svc["healthcheck"]["test"]),
                 f"{name}: the healthcheck does not probe its --listen port")
    need(len(model_mounts) == 1, f"the model is mounted at different paths: {model_mounts}")
    need(len(set(metrics_hosts)) == len(metrics_hosts), f"metrics host ports repeat: {metrics_hosts}")
    coord = services["coordinator"]["command"]
    workers = flag_value(coord, "workers").split(",")
    need([w.rsplit(":", 1)[0] for w in workers] == sorted(listen), f"--workers {workers} must list the worker services in order")
    for w in workers:
        host, port = w.rsplit(":", 1)
        need(listen.get(host) == port, f"--workers entry {w}: {host} listens on {listen.get(host)}")
    need(flag_value(coord, "advertise") == f"coordinator:{flag_value(coord, 'listen').rsplit(':', 1)[1]}",
         "the coordinator must advertise its service name")
    vol = doc["volumes"]["model"]["driver_opts"]
    need(vol.get("o") == "bind" and vol.get("device") == "/srv/models/gemma-4-12b", "the model volume must bind LAYERPIPE_MODEL_DIR")
    return f"{len(services)} services"


def check_systemd(ctx):
    units = deploy_files.units(ctx)
    need({"layerpipe-coordinator.service", "layerpipe-worker@.service"} <= set(units), "the two service units are missing")
    for name, unit in units.items():
        if not name.endswith(".service"):
            continue
        instance = "7001" if "@" in name else ""
        cmds, env = deploy_files.unit_commands(ctx, name, unit, instance)
        need(len(cmds.get("ExecStart", [])) == 1, f"{name}: one ExecStart expected")
        argv = cmds["ExecStart"][0]
        need(argv[0].startswith("/usr/local/bin/"), f"{name}: ExecStart must name /usr/local/bin/<binary>")
        program = ctx.programs.check_argv(argv, f"{name} ExecStart")
        need(program in ("layerpipe-coordinator", "layerpipe-worker"), f"{name}: runs {program}")
        for pre in cmds.get("ExecStartPre", []):
            need(os.path.basename(pre[0]) == "layerpipe-check-model" and pre[-1] == env["LAYERPIPE_MODEL"],
                 f"{name}: ExecStartPre must check LAYERPIPE_MODEL")
            want = {"--no-weights", "--tokenizer"} if program == "layerpipe-coordinator" else set()
            need(set(pre[1:-1]) == want, f"{name}: ExecStartPre checks with {pre[1:-1]}, expected {want}")
        if "@" in name:
            need(flag_value(argv, "listen").endswith(":7001"), f"{name}: --listen must take the instance's port")
        need(unit["Service"].get("KillSignal", ["SIGTERM"])[0] == "SIGTERM", f"{name}: the servers stop on SIGTERM")
        need("2" in unit["Service"].get("RestartPreventExitStatus", [""])[0].split(), f"{name}: usage errors (exit 2) must not restart")
    coord_env = deploy_files.env_file(ctx, "coordinator.env")
    worker_ports = {w.rsplit(":", 1)[1] for w in coord_env["LAYERPIPE_WORKERS"].split(",")}
    need(len(worker_ports) == len(coord_env["LAYERPIPE_WORKERS"].split(",")), "coordinator.env: worker ports repeat")
    need(coord_env["LAYERPIPE_MODEL"] == deploy_files.env_file(ctx, "worker.env")["LAYERPIPE_MODEL"],
         "coordinator.env and worker.env must name the same model path")
    note = f"{len(units)} units"
    analyze = shutil.which("systemd-analyze")
    if analyze:
        note += ", " + systemd_analyze(ctx, analyze, units)
    else:
        note += " (systemd-analyze not installed: unit syntax checked by this script only)"
    return note


def systemd_analyze(ctx, analyze, units):
    """systemd-analyze verify on copies whose binaries and env files point into this tree."""
    d = tempfile.mkdtemp(dir=ctx.work, prefix="units-")
    for f in ("coordinator.env", "worker.env"):
        shutil.copy(ctx.path("deploy", "systemd", f), d)
    exe_dir = ctx.bin or "/bin"
    names = []
    for name in units:
        text = read(ctx.path("deploy", "systemd", name))
        text = text.replace("/usr/local/bin/layerpipe-check-model", os.path.join(ctx.chart, "files", "check-model.sh"))
        text = re.sub(r"/usr/local/bin/(layerpipe[-\w]*)",
                      lambda m: os.path.join(exe_dir, m.group(1)) if ctx.bin else "/bin/true", text)
        text = text.replace("/etc/layerpipe/", d + "/")
        out_name = name.replace("@.", "@7001.")
        with open(os.path.join(d, out_name), "w") as f:
            f.write(text)
        names.append(os.path.join(d, out_name))
    if "layerpipe-worker@7001.service" in [os.path.basename(n) for n in names]:
        shutil.copy(os.path.join(d, "layerpipe-worker@7001.service"), os.path.join(d, "layerpipe-worker@.service"))
    p = subprocess.run([analyze, "verify", "--man=no", *names], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, SYSTEMD_LOG_LEVEL="warning"))
    issues = [l for l in (p.stdout + p.stderr).splitlines()
              if l.strip() and not re.search(r"(Failed to (connect|create|setup).*bus|Failed to initialize|"
                                             r"is not a valid unit name|Unit .*target not found|"
                                             r"multi-user.target|Running in chroot)", l)]
    need(p.returncode == 0 and not issues, f"systemd-analyze verify: rc {p.returncode}: {issues}")
    shutil.rmtree(d, ignore_errors=True)
    return "systemd-analyze verify clean"


def check_dockerfiles(ctx):
    targets = set()
    for d in ("coordinator", "worker", "cli"):
        targets |= set(re.findall(r"add_executable\(\s*([\w-]+)", read(ctx.path(d, "CMakeLists.txt"))))
    need(set(BINARIES) <= targets, f"CMake does not define {set(BINARIES) - targets}")
    for name, build_base, runtime_base in (("Dockerfile.cpu", r"debian:bookworm$", r"debian:bookworm-slim$"),
                                           ("Dockerfile.cuda", r"nvidia/cuda:13\.[\d.]+-devel-ubuntu[\d.]+$",
                                            r"nvidia/cuda:13\.[\d.]+-runtime-ubuntu[\d.]+$")):
        stages = parse_dockerfile(read(ctx.path("deploy", name)))
        need([s["name"] for s in stages] == ["build", "runtime"], f"{name}: stages must be build then runtime")
        build, runtime = stages
        need(re.match(build_base, build["from"]), f"{name}: build stage is FROM {build['from']}")
        need(re.match(runtime_base, runtime["from"]), f"{name}: runtime stage is FROM {runtime['from']}")
        build_runs = " ".join(build["RUN"])
        for script in ("scripts/install_deps.sh", "scripts/build.sh", "deploy/runtime-packages.sh",
                       "helm/layerpipe/files/check-model.sh"):
            need(script in build_runs, f"{name}: the build stage does not use {script}")
            need(os.path.isfile(ctx.path(script)), f"{name}: {script} does not exist")
        copied = set(re.findall(r"build/bin/([\w-]+)", build_runs))
        for b in BINARIES:
            need(b in copied, f"{name}: {b} is not copied out of build/bin")
        need(any("--from=build" in c for c in runtime["COPY"]), f"{name}: the runtime stage copies nothing from the build")
        need(runtime.get("USER") and runtime["USER"][-1].split(":")[0] not in ("0", "root"), f"{name}: the image runs as root")
        need(any("not found" in r for r in runtime["RUN"]), f"{name}: the runtime stage does not check for missing libraries")
        ignore = read(ctx.path("deploy", name + ".dockerignore")).split()
        need("build" in ignore and "third_party/npm" in ignore, f"{name}.dockerignore must exclude build and third_party/npm")
    note = "2 Dockerfiles"
    if ctx.bin and shutil.which("dpkg-query"):
        p = subprocess.run(["sh", ctx.path("deploy", "runtime-packages.sh"), *[os.path.join(ctx.bin, b) for b in BINARIES]],
                           capture_output=True, text=True, timeout=120)
        need(p.returncode == 0, f"runtime-packages.sh failed: {p.stderr}")
        pkgs = {l.split(":")[0] for l in p.stdout.split()}
        for want in ("libgrpc++", "libprotobuf", "libabsl"):
            need(any(x.startswith(want) for x in pkgs), f"runtime-packages.sh lists no {want}* package: {sorted(pkgs)}")
        note += f"; runtime packages here: {' '.join(sorted(pkgs))}"
    return note


def check_sizing(ctx):
    sys.path.insert(0, ctx.path("deploy"))
    try:
        sizing = importlib.import_module("sizing")
        importlib.reload(sizing)
    finally:
        sys.path.pop(0)
    # MODEL.md: 40 sliding x 14 + 8 full x 13 decoder tensors, 21,801,427,040 bytes; 4 GiB of global cache per
    # sequence at 262,144 tokens on top of the sliding layers' fixed rings with K and V rows apart, of which
    # the joined rows (engine/model/joined_kv.h) keep 640 of every 1024 values: 2.5 GiB.
    decoder = sum(sizing.LAYER_BYTES[t] for t in sizing.LAYER_TYPES)
    need(decoder == 21_801_427_040, f"decoder weights {decoder} != MODEL.md's 21,801,427,040 bytes")
    # int8 (docs/quantization.md): the 10,899,947,520 matrix values at one byte, a bf16 scale per 32 of them,
    # the norms (1,532,000 bytes) as stored.
    int8 = sum(sizing.layer_bytes(t, "int8") for t in sizing.LAYER_TYPES)
    need(int8 == 10_899_947_520 + 10_899_947_520 // 32 * 2 + 1_532_000, f"int8 decoder weights {int8}")
    need(sizing.kv_bytes(0, 48, 262144) - 40 * 1024 * 2 * 8 * 256 * 2 == (4 << 30) * 640 // 1024,
         "full-layer KV at 262,144 tokens != 2.5 GiB (MODEL.md's 4 GiB, K and V joined)")
    # PlanLayerRanges of coordinator/scheduling/planner.cc for the 12B config, as the C++ computed it when the port was
    # written; a change of the planner shows here.
    for workers, split in ((2, "0-25,26-47"), (4, "0-12,13-25,26-38,39-47"),
                           (8, "0-5,6-11,12-17,18-24,25-31,32-38,39-45,46-47")):
        got = ",".join(f"{b}-{e - 1}" for b, e in sizing.plan_layer_ranges(workers))
        need(got == split, f"the planner port splits {workers} workers as {got}, the coordinator as {split}")
    p = subprocess.run([sys.executable, ctx.path("deploy", "sizing.py"), "--check", ctx.path("docs", "deploy.md")],
                       capture_output=True, text=True, timeout=60)
    need(p.returncode == 0, f"docs/deploy.md: {p.stderr.strip()}")
    return "docs/deploy.md tables match"
