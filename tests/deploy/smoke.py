"""Smoke run (with built binaries): the exact coordinator/worker command lines of the rendered chart (helm
template's output), the compose file and the systemd units, with addresses and the model path rewritten to
loopback and a tiny generated 48-layer checkpoint, start a real pipeline; the coordinator's gRPC health is
NOT_SERVING until its workers serve and SERVING after; the chart's `helm test` command and the compose health
checks succeed against it; every --metrics-listen serves Prometheus text; the chart's TLS example runs with a
generated CA and certificate (health over TLS, a worker refuses callers without a client certificate, the
client is refused without its token); SIGTERM stops every process with status 0."""
import base64
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

import deploy_files
from flags import flag_value
from util import TINY_CHECKPOINT, Fail, free_port, need, read


def check_smoke(ctx):
    if not ctx.smoke:
        return "skipped (--no-smoke)"
    if not ctx.bin:
        return "skipped: no built binaries (build/bin)"
    model = os.path.join(ctx.work, "smoke-model")
    shutil.rmtree(model, ignore_errors=True)
    subprocess.run([os.path.join(ctx.bin, "layerpipe"), "make-checkpoint", "--out", model, *TINY_CHECKPOINT,
                    "--shards", "2"], check=True, capture_output=True, timeout=120)
    runs = []
    # The chart, defaults and the GPU example: container command + args, flagfiles from the ConfigMap.
    for scenario in ("defaults", "ci/gpu-values.yaml", "ci/tls-values.yaml"):
        values, objects = ctx.rendered[scenario].values, ctx.rendered[scenario].objects
        pods = {o["kind"]: o for _, o in objects if o["kind"] in ("Deployment", "StatefulSet")}
        config = [o for _, o in objects if o["kind"] == "ConfigMap"][0]["data"]
        coord = pods["Deployment"]["spec"]["template"]["spec"]["containers"][0]
        worker = pods["StatefulSet"]["spec"]["template"]["spec"]["containers"][0]
        test_pod = [o for _, o in objects if o["kind"] == "Pod"][0]["spec"]["containers"][0]
        cargv, wargv, targv = coord["command"] + coord["args"], worker["command"] + worker["args"], test_pod["command"] + test_pod["args"]
        want_device = "cuda" if values["workers"]["gpu"]["enabled"] else None
        need(flag_value(wargv, "device") == want_device,
             f"chart {scenario}: workers run with --device={flag_value(wargv, 'device')}, want {want_device}")
        pki = None
        if values["tls"]["enabled"] or values["auth"]["enabled"]:
            # The Secret's files, generated: the flags' paths under secret.mountPath point at them.
            pki = make_test_secret(os.path.join(ctx.work, "smoke-secret"), values)
            mount = values["secret"]["mountPath"] + "/"
            cargv, wargv, targv = ([a.replace(mount, pki["dir"] + "/") for a in argv] for argv in (cargv, wargv, targv))
        runs.append((f"chart {scenario}", cargv, [wargv] * values["workers"]["replicas"],
                     {"coordinator.flags": config["coordinator.flags"], "worker.flags": config["worker.flags"]},
                     [targv], pki))
    # Compose.
    doc, _ = deploy_files.compose(ctx)
    svcs = doc["services"]
    workers = flag_value(svcs["coordinator"]["command"], "workers").split(",")
    runs.append(("compose", svcs["coordinator"]["command"], [svcs[w.rsplit(":", 1)[0]]["command"] for w in workers], {},
                 [svcs["coordinator"]["healthcheck"]["test"][1:]], None))
    # systemd: one worker instance per port of LAYERPIPE_WORKERS.
    units = deploy_files.units(ctx)
    ccmd, cenv = deploy_files.unit_commands(ctx, "layerpipe-coordinator.service", units["layerpipe-coordinator.service"], "")
    wcmds = [deploy_files.unit_commands(ctx, "layerpipe-worker@.service", units["layerpipe-worker@.service"], w.rsplit(":", 1)[1])[0]["ExecStart"][0]
             for w in cenv["LAYERPIPE_WORKERS"].split(",")]
    runs.append(("systemd", ccmd["ExecStart"][0], wcmds, {}, [], None))
    notes = []
    for name, cargv, wargvs, flagfiles, clients, pki in runs:
        notes.append(smoke_run(ctx, name, model, cargv, wargvs, flagfiles, clients, pki))
    shutil.rmtree(model, ignore_errors=True)
    return "; ".join(notes)


def smoke_run(ctx, name, model, cargv, wargvs, flagfiles, clients, pki=None):
    d = tempfile.mkdtemp(dir=ctx.work, prefix="smoke-")
    for fname, text in flagfiles.items():
        with open(os.path.join(d, fname), "w") as f:
            f.write(text or "")

    def rewrite(argv, replace):
        out = [os.path.join(ctx.bin, os.path.basename(argv[0]))]
        for a in argv[1:]:
            flag = a[2:].split("=", 1)[0] if a.startswith("--") else None
            if flag in replace:
                if replace[flag] is not None:
                    out.append(f"--{flag}={replace[flag]}")
            else:
                out.append(a)
        return out

    def flagfile(argv):
        path = flag_value(argv, "flagfile")
        return os.path.join(d, os.path.basename(path)) if path else None

    procs = []

    def start(argv, log):
        f = open(os.path.join(d, log), "w")
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT)
        procs.append((p, log, f))
        return p

    def wait_line(log, p, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = read(os.path.join(d, log))
            m = re.search(r"listening on (\S+)", text)
            if m:
                return m.group(1)
            need(p.poll() is None, f"{name}: {log} exited {p.returncode}: {text[-2000:]}")
            time.sleep(0.05)
        raise Fail(f"{name}: {log} did not start: {read(os.path.join(d, log))[-2000:]}")

    try:
        # The coordinator first, on a fixed port: it must report NOT_SERVING while its workers are absent.
        wports = [free_port() for _ in wargvs]
        cport = free_port()
        # Servers with metrics get a free loopback port of their own, scraped once the pipeline serves.
        metrics = {}

        def metrics_of(argv, log):
            if not flag_value(argv, "metrics-listen"):
                return {}
            metrics[log] = free_port()
            return {"metrics-listen": f"127.0.0.1:{metrics[log]}"}
        # A separate peer port: the workers then report there (its default advertised host is 127.0.0.1).
        peer = {"peer-listen": f"127.0.0.1:{free_port()}"} if flag_value(cargv, "peer-listen") else {}
        tls = pki if pki and flag_value(cargv, "tls-cert") else None
        # Each run's jobs in a directory of its own, whatever the deployment names (/var/lib/layerpipe).
        coord = start(rewrite(cargv, {"listen": f"127.0.0.1:{cport}", "advertise": None, "model": model, **peer,
                                      "state-dir": os.path.join(d, "state"),
                                      "workers": ",".join(f"127.0.0.1:{p}" for p in wports),
                                      "flagfile": flagfile(cargv), **metrics_of(cargv, "coordinator.log")}),
                      "coordinator.log")
        health_note = ""
        status = grpc_health(f"127.0.0.1:{cport}", timeout=30, until_answer=True, tls=tls and {"ca": tls["ca"]})
        if status is not None:
            need(status == "NOT_SERVING", f"{name}: the coordinator is {status} before its workers exist")
            health_note = ", health NOT_SERVING -> SERVING"
        # GPU workers run on the CPU here: the smoke run checks command lines, not hardware.
        device = {"device": "cpu"} if flag_value(wargvs[0], "device") else {}
        workers = [start(rewrite(a, {"listen": f"127.0.0.1:{port}", "model": model, "flagfile": flagfile(a), **device,
                                     **metrics_of(a, f"worker{i}.log")}), f"worker{i}.log")
                   for i, (a, port) in enumerate(zip(wargvs, wports))]
        for i, w in enumerate(workers):
            wait_line(f"worker{i}.log", w)
        addr = wait_line("coordinator.log", coord)
        need(addr.endswith(f":{cport}"), f"{name}: the coordinator listens on {addr}")
        if health_note:
            need(grpc_health(f"127.0.0.1:{cport}", tls=tls and {"ca": tls["ca"]}) == "SERVING",
                 f"{name}: the coordinator is not SERVING once ready")
            for port in wports:
                need(grpc_health(f"127.0.0.1:{port}", tls=tls) == "SERVING", f"{name}: a worker is not SERVING")
            if tls:
                # Mutual TLS: a worker refuses a caller without a certificate of the cluster CA.
                need(grpc_health(f"127.0.0.1:{wports[0]}", tls={"ca": tls["ca"]}) != "SERVING",
                     f"{name}: a TLS worker answers a caller without a client certificate")
                health_note += ", mutual TLS"
        for log, port in metrics.items():
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                body = r.read().decode()
                need(r.status == 200 and r.headers.get("Content-Type", "").startswith("text/plain")
                     and re.search(r"^# TYPE layerpipe_\w+ ", body, re.M),
                     f"{name}: {log}'s --metrics-listen does not serve Prometheus text at /metrics")
        for client in clients:
            argv = [os.path.join(ctx.bin, client[0])] + [
                f"--coordinator=127.0.0.1:{cport}" if a.startswith("--coordinator=") else
                f"127.0.0.1:{cport}" if re.fullmatch(r"127\.0\.0\.1:\d+", a) else a for a in client[1:]]
            p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
            need(p.returncode == 0, f"{name}: {' '.join(client)} failed: {p.stdout}{p.stderr}")
            if flag_value(argv, "token-file"):
                # The coordinator takes --auth-tokens seriously: the same call without the token is refused.
                bare = [a for a in argv if not a.startswith("--token-file")]
                p = subprocess.run(bare, capture_output=True, text=True, timeout=120)
                need(p.returncode != 0 and "UNAUTHENTICATED" in p.stdout + p.stderr,
                     f"{name}: a client without a token was not refused: {p.stdout}{p.stderr}")
                health_note += ", tokens required"
        # SIGTERM: the coordinator, then the workers, each exit 0.
        for p, log, _ in procs:
            p.send_signal(signal.SIGTERM)
            try:
                rc = p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                raise Fail(f"{name}: {log} did not stop on SIGTERM") from None
            need(rc == 0, f"{name}: {log} exited {rc} on SIGTERM: {read(os.path.join(d, log))[-1000:]}")
        return f"{name}: {len(wargvs)} workers{health_note}, {len(metrics)} /metrics scraped, {len(clients)} client command(s)"
    finally:
        for p, _, f in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def make_test_secret(d, values):
    """The chart's Secret for a loopback run: a throwaway CA and one certificate for 127.0.0.1 with both
    serverAuth and clientAuth (as the chart's single certificate needs), a token file and the test token."""
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    tls, auth = values["tls"], values["auth"]

    def ossl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d, timeout=60)
    ossl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
         "-subj", "/CN=layerpipe smoke CA", "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    ossl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "leaf.key", "-out", "leaf.csr", "-subj", "/CN=localhost")
    with open(os.path.join(d, "leaf.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n"
                "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n")
    ossl("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", "leaf.pem",
         "-days", "2", "-extfile", "leaf.ext")
    for src, key in (("ca.pem", tls["caKey"]), ("leaf.pem", tls["certKey"]), ("leaf.key", tls["keyKey"])):
        shutil.copy(os.path.join(d, src), os.path.join(d, key))
    token = "smoke-" + base64.b16encode(os.urandom(12)).decode().lower()
    with open(os.path.join(d, auth["tokensKey"]), "w") as f:
        f.write(f"helm-test:{token}\n")
    with open(os.path.join(d, auth["testTokenKey"]), "w") as f:
        f.write(token + "\n")
    return {"dir": d, "ca": os.path.join(d, tls["caKey"]), "cert": os.path.join(d, tls["certKey"]),
            "key": os.path.join(d, tls["keyKey"])}


def grpc_health(target, timeout=5, until_answer=False, tls=None):
    """grpc.health.v1.Health/Check of the server's overall status, as Kubernetes' grpc probe asks it; over TLS
    with tls={"ca": file} (and "cert", "key" for a client certificate). None when python3-grpcio is not installed."""
    try:
        import grpc
    except ImportError:
        return None
    deadline = time.monotonic() + timeout
    while True:
        if tls:
            def pem(key):
                return open(tls[key], "rb").read() if tls.get(key) else None
            channel = grpc.secure_channel(target, grpc.ssl_channel_credentials(pem("ca"), pem("key"), pem("cert")))
        else:
            channel = grpc.insecure_channel(target)
        with channel as ch:
            try:
                # HealthCheckRequest{service: ""} is empty on the wire; the answer is {status: enum} (field 1).
                raw = ch.unary_unary("/grpc.health.v1.Health/Check")(b"", timeout=5)
                status = raw[1] if len(raw) >= 2 and raw[0] == 0x08 else 0
                return {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}.get(status, str(status))
            except grpc.RpcError as e:
                if not until_answer or time.monotonic() > deadline:
                    return f"error {e.code()}"
        time.sleep(0.1)
