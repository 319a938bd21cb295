#!/usr/bin/env python3
"""Checks the deployment files: the Helm chart, the compose file, the systemd units, the images and the docs.

No helm binary or Docker engine is needed. What is checked:
- chart: Chart.yaml and values.yaml parse; values.schema.json is a valid draft-07 schema that accepts
  values.yaml and every ci/*-values.yaml and rejects broken values; every `.Values.x.y` path a template
  names (directly or through a `$v := .Values...` variable) exists in values.yaml; every template renders
  (tests/deploy/gotemplate.py, Go template semantics) and parses as YAML (duplicate keys rejected) for the
  default values, each ci/*-values.yaml and a few variants; the rendered objects hang together: selectors
  match pod labels, the StatefulSet's headless Service, the coordinator's --workers list is exactly the
  StatefulSet's stable DNS names for workers.replicas, ports agree between flags, containers, probes
  (native gRPC, or tcpSocket with tls.enabled) and Services, the model volume is mounted read-only at the
  same path everywhere, GPU requests appear only with workers.gpu.enabled, the Secret is mounted when
  enabled, every flag exists; metrics: --metrics-listen, the `metrics` containerPort, the prometheus.io/*
  annotations and the Services' metrics port agree (all absent when off), the ServiceMonitor follows its
  values and selects both Services; TLS, tokens, limits: exactly the expected --tls-*/--peer-*/--auth-tokens/
  --max-concurrent-per-client flags, naming files under the mounted Secret (present in secret.data when the
  chart creates it), the peer port in flag, containerPort, Service and --advertise, and the helm test pod
  mounting the Secret and passing --tls-ca/--token-file.
- compose, systemd, Dockerfiles: they parse, name the three binaries and only flags the binaries define
  (from their --helpfull, or the source's ABSL_FLAG definitions without a build), the compose --workers
  list names the worker services at their ports, every compose server exposes and publishes (once) its
  --metrics-listen port, the units' variables (metrics, TLS included) are defined by the shipped env files.
- check-model.sh (the init container, ExecStartPre and image helper) accepts a complete checkpoint and
  rejects incomplete ones; deploy/runtime-packages.sh resolves the binaries' libraries to packages.
- docs/deploy.md's sizing tables equal what deploy/sizing.py computes from MODEL.md's shapes.
- smoke (with built binaries): the exact coordinator/worker command lines of the rendered chart, the
  compose file and the systemd units (addresses and model path rewritten to loopback and a tiny generated
  48-layer checkpoint) start a real pipeline; the coordinator's gRPC health is NOT_SERVING until its workers
  serve and SERVING after; the chart's `helm test` command and the compose health checks succeed
  against it; every --metrics-listen serves Prometheus text; the chart's TLS example runs with a generated
  CA and certificate (health over TLS, a worker refuses callers without a client certificate, the client
  is refused without its token); SIGTERM stops every process with status 0.

--self-test copies the files, injects one error at a time and asserts the checker fails on each.
"""
import argparse
import base64
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gotemplate  # noqa: E402

try:
    import jsonschema
except ImportError:  # reported as a failure by check_schema
    jsonschema = None

BINARIES = ("layerpipe", "layerpipe-coordinator", "layerpipe-worker")
ABSL_BUILTIN_FLAGS = {"flagfile", "fromenv", "tryfromenv", "undefok", "help", "helpfull", "helpshort",
                      "helppackage", "version", "only_check_args"}
RELEASE, NAMESPACE = "layerpipe", "inference"
# What coordinator/pipeline.cc allows one assignment (mapping the weights) on top of --startup-timeout.
ASSIGN_TIMEOUT_S = 600


class Fail(Exception):
    pass


def need(cond, msg):
    if not cond:
        raise Fail(msg)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def parse_duration(text):
    """absl/Go duration (1h30m, 10m, 30s, 500ms) in seconds."""
    units = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
    parts = re.findall(r"([0-9]+(?:\.[0-9]+)?)(ns|us|ms|s|m|h)", text)
    need(parts and "".join(a + b for a, b in parts) == text, f"bad duration {text!r}")
    return sum(float(a) * units[b] for a, b in parts)


def split_flags(argv):
    """[(name, value or None)] of the --flags in argv; `--name value` is accepted like `--name=value`."""
    out, i = [], 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--"):
            if "=" in a:
                name, value = a[2:].split("=", 1)
            elif i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                name, value = a[2:], argv[i + 1]
                i += 1
            else:
                name, value = a[2:], None
            out.append((name, value))
        i += 1
    return out


def flag_value(argv, name):
    """The last value of --name in argv, whichever of dashes or underscores spell it."""
    values = [v for n, v in split_flags(argv) if n.replace("-", "_") == name.replace("-", "_")]
    return values[-1] if values else None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Checker:
    def __init__(self, src, bin_dir, work, smoke):
        self.src = os.path.abspath(src)
        self.bin = os.path.abspath(bin_dir) if bin_dir else None
        if self.bin and not all(os.access(os.path.join(self.bin, b), os.X_OK) for b in BINARIES):
            self.bin = None
        self.work = work
        self.smoke = smoke
        self.chart = os.path.join(self.src, "helm", "layerpipe")
        self.failed = []
        self.passed = 0
        self._flags = {}
        self.rendered = {}  # scenario -> (values, {template: text}, [(template, object)], release name)

    # -- bookkeeping ------------------------------------------------------------------------------------
    def run(self, name, fn):
        t0 = time.monotonic()
        try:
            note = fn()
            self.passed += 1
            print(f"PASS {name} ({time.monotonic() - t0:.1f}s){': ' + note if note else ''}", flush=True)
        except (Fail, gotemplate.TemplateError, yaml.YAMLError, OSError, subprocess.SubprocessError) as e:
            self.failed.append(name)
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
        except Exception:  # noqa: BLE001 - a rendered object without an expected field, say: report, go on
            self.failed.append(name)
            print(f"FAIL {name}: {traceback.format_exc()}", flush=True)

    def path(self, *parts):
        return os.path.join(self.src, *parts)

    # -- flags the programs define ----------------------------------------------------------------------
    def flags_of(self, program, sub=()):
        """Flag names `program` accepts: from the built binary's help, else from the source."""
        key = (program,) + tuple(sub)
        if key in self._flags:
            return self._flags[key]
        names = None
        if self.bin:
            exe = os.path.join(self.bin, program)
            if program == "layerpipe":
                out = subprocess.run([exe, *sub, "--help"], capture_output=True, text=True, timeout=30)
                names = set(re.findall(r"^\s+--([a-z0-9][a-z0-9-]*)", out.stdout + out.stderr, re.M))
            else:
                out = subprocess.run([exe, "--helpfull"], capture_output=True, text=True, timeout=30)
                names = set(re.findall(r"^\s+--([a-z0-9_]+) \(", out.stdout + out.stderr, re.M))
            need(names, f"{program} --help listed no flags")
        elif program != "layerpipe":
            main = self.path("coordinator" if program == "layerpipe-coordinator" else "worker", "main.cc")
            names = set(re.findall(r"ABSL_FLAG\(\s*[\w:<>]+\s*,\s*(\w+)\s*,", read(main)))
            need(names, f"no ABSL_FLAG definitions in {main}")
        if names is not None and program != "layerpipe":
            names |= ABSL_BUILTIN_FLAGS
        self._flags[key] = names
        return names

    def check_argv(self, argv, where, in_flagfile=False):
        """argv names a layerpipe program and only flags it defines. Returns the program's name."""
        need(argv, f"{where}: empty command")
        program = os.path.basename(argv[0])
        if program == "layerpipe-check-model":
            return program
        need(program in BINARIES, f"{where}: {argv[0]!r} is not one of {', '.join(BINARIES)}")
        sub = []
        if program == "layerpipe":
            for a in argv[1:]:
                if a.startswith("-"):
                    break
                sub.append(a)
        known = self.flags_of(program, sub)
        if known is None:
            return program  # the CLI's flags are only known from a built binary
        for name, _ in split_flags(argv[1 + len(sub):]):
            # The servers turn dashes into underscores on their command line, not in flagfiles (absl reads those).
            spelled = name if in_flagfile or program == "layerpipe" else name.replace("-", "_")
            need(spelled in known, f"{where}: {program} has no flag --{name}")
        return program

    def check_flag_lines(self, text, program, where):
        for line in text.splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                self.check_argv([program, line], where, in_flagfile=True)

    # =====================================================================================================
    # Chart
    # =====================================================================================================
    def values(self):
        return yaml.safe_load(read(os.path.join(self.chart, "values.yaml")))

    def ci_values(self):
        ci = os.path.join(self.chart, "ci")
        return {f: yaml.safe_load(read(os.path.join(ci, f))) for f in sorted(os.listdir(ci)) if f.endswith(".yaml")}

    def check_chart_metadata(self):
        chart = yaml.safe_load(read(os.path.join(self.chart, "Chart.yaml")))
        need(chart.get("apiVersion") == "v2", "Chart.yaml: apiVersion must be v2")
        need(chart.get("name") == "layerpipe", "Chart.yaml: name must be the directory's, layerpipe")
        need(re.fullmatch(r"\d+\.\d+\.\d+(-[\w.]+)?", str(chart.get("version", ""))), "Chart.yaml: version is not SemVer")
        need(chart.get("appVersion"), "Chart.yaml: appVersion missing")
        need(isinstance(self.values(), dict), "values.yaml is not a mapping")
        for name, v in self.ci_values().items():
            need(isinstance(v, dict), f"ci/{name} is not a mapping")
        need(os.path.isfile(os.path.join(self.chart, "templates", "NOTES.txt")), "templates/NOTES.txt missing")

    def check_schema(self):
        need(jsonschema is not None, "python3-jsonschema is not installed (scripts/install_deps.sh)")
        schema = json.loads(read(os.path.join(self.chart, "values.schema.json")))
        need(schema.get("$schema", "").startswith("http://json-schema.org/draft-07/"), "the schema must declare draft-07")
        jsonschema.Draft7Validator.check_schema(schema)
        validator = jsonschema.Draft7Validator(schema)

        def errors(v):
            return [f"{'.'.join(map(str, e.path)) or '(top)'}: {e.message}" for e in validator.iter_errors(v)]

        base = self.values()
        need(not errors(base), f"values.yaml is rejected: {errors(base)}")
        for name, override in self.ci_values().items():
            # Helm validates the values after coalescing the user's over the chart's.
            merged = gotemplate.merge_values(base, override)
            need(not errors(merged), f"ci/{name} is rejected: {errors(merged)}")
        broken = {
            "workers.replicas two": {"workers": {"replicas": "two"}},
            "workers.replicas 0": {"workers": {"replicas": 0}},
            "workers.replicas 49 (more stages than layers)": {"workers": {"replicas": 49}},
            "precision fp16": {"precision": "fp16"},
            "model.source nfs": {"model": {"source": "nfs"}},
            "pvc without claimName": {"model": {"source": "pvc", "pvc": {"claimName": ""}}},
            "hostPath relative": {"model": {"source": "hostPath", "hostPath": {"path": "models"}}},
            "duration without unit": {"coordinator": {"recoveryDeadline": "30"}},
            "flag with dashes": {"coordinator": {"extraFlags": ["--max-batch=32"]}},
            "kvBudget 4 gigs": {"workers": {"kvBudget": "4 gigs"}},
            "gpu count 0": {"workers": {"gpu": {"count": 0}}},
            "secret both created and existing": {"secret": {"create": True, "existingSecret": "mine"}},
            "unknown top-level key": {"replicas": 2},
            "typo in workers": {"workers": {"replica": 3}},
            "metrics.port as a string": {"metrics": {"port": "9100"}},
            "metrics.serviceMonitor.interval without unit": {"metrics": {"serviceMonitor": {"interval": "30"}}},
            "coordinator.peerPort 0": {"coordinator": {"peerPort": 0}},
            "tls.enabled as a string": {"tls": {"enabled": "yes"}},
            "a Secret key with a slash": {"tls": {"caKey": "certs/ca.crt"}},
            "typo in tls": {"tls": {"enable": True}},
            "negative per-client limit": {"limits": {"maxConcurrentPerClient": -1}},
        }
        for what, override in broken.items():
            need(errors(gotemplate.merge_values(base, override)), f"the schema accepts broken values: {what}")
        return f"values.yaml and {len(self.ci_values())} ci values accepted, {len(broken)} broken variants rejected"

    def check_values_paths(self):
        """Every .Values path a template names exists in values.yaml (also through `$v := .Values.a.b`)."""
        values = self.values()
        problems, count = [], 0
        tdir = os.path.join(self.chart, "templates")
        for root, _, files in os.walk(tdir):
            for fname in sorted(files):
                rel = os.path.relpath(os.path.join(root, fname), self.chart)
                text = read(os.path.join(root, fname))
                aliases = {m.group(1): m.group(2)[1:].split(".")
                           for m in re.finditer(r"\$(\w+)\s*:?=\s*\.Values((?:\.\w+)+)\s*(?:}}|-}})", text)}
                paths = [m.group(1)[1:].split(".") for m in re.finditer(r"\.Values((?:\.\w+)+)", text)]
                for m in re.finditer(r"\$(\w+)((?:\.\w+)+)", text):
                    if m.group(1) in aliases:
                        paths.append(aliases[m.group(1)] + m.group(2)[1:].split("."))
                for p in paths:
                    count += 1
                    node = values
                    for i, key in enumerate(p):
                        if not isinstance(node, dict) or key not in node:
                            problems.append(f"{rel}: .Values.{'.'.join(p)} ({'.'.join(p[:i + 1])} is not in values.yaml)")
                            break
                        node = node[key]
        need(not problems, "; ".join(sorted(set(problems))))
        return f"{count} references"

    def scenarios(self):
        out = {"defaults": []}
        for name, override in self.ci_values().items():
            out[f"ci/{name}"] = [override]
        out["replicas 1"] = [{"workers": {"replicas": 1}}]
        out["replicas 5, layerSplit"] = [{"workers": {"replicas": 5},
                                         "coordinator": {"layerSplit": "0-9,10-19,20-29,30-39,40-47"}}]
        out["existing secret, subPath, no validation"] = [{
            "secret": {"existingSecret": "layerpipe-tls"},
            "model": {"subPath": "gemma-4-12b-it", "validate": {"enabled": False, "requireTokenizer": True}},
            "fullnameOverride": "lp"}]
        out["metrics off"] = [{"metrics": {"enabled": False, "serviceMonitor": {"enabled": True}}}]
        out["tls only, created secret"] = [{
            "coordinator": {"peerPort": 7443},
            "tls": {"enabled": True, "certKey": "server.pem", "keyKey": "server-key.pem", "caKey": "cluster-ca.pem"},
            "secret": {"create": True, "data": {"server.pem": "c", "server-key.pem": "k", "cluster-ca.pem": "a"}},
            "metrics": {"port": 9091}}]
        out["tokens without TLS, limit"] = [{"auth": {"enabled": True}, "limits": {"maxConcurrentPerClient": 4},
                                            "secret": {"create": True, "data": {"tokens": "t", "test-token": "t"}}}]
        out["release name without the chart's"] = "prod"  # a release name instead of overrides
        return out

    def render(self, scenario, overrides):
        release = RELEASE
        if isinstance(overrides, str):
            release, overrides = overrides, []
        rendered = gotemplate.render_chart(self.chart, overrides, release=release, namespace=NAMESPACE)
        values = self.values()
        for o in overrides:
            values = gotemplate.merge_values(values, o)
        return values, rendered, release

    def check_render(self):
        notes = []
        for scenario, overrides in self.scenarios().items():
            try:
                values, rendered, release = self.render(scenario, overrides)
                objects = []
                for tname, text in rendered.items():
                    if tname.endswith("NOTES.txt"):
                        continue
                    try:
                        docs = gotemplate.load_yaml_documents(text)
                    except yaml.YAMLError as e:
                        raise Fail(f"{tname} is not valid YAML: {e}") from None
                    for d in docs:
                        need(isinstance(d, dict), f"{tname}: a document is not a mapping")
                        objects.append((tname, d))
                self.check_objects(values, rendered, objects, release)
                self.rendered[scenario] = (values, rendered, objects, release)
                notes.append(f"{scenario}: {len(objects)} objects")
            except (Fail, gotemplate.TemplateError) as e:
                raise Fail(f"[{scenario}] {e}") from None
        return "; ".join(notes)

    def check_objects(self, values, rendered, objects, release):
        by_kind = {}
        for tname, o in objects:
            for key in ("apiVersion", "kind", "metadata"):
                need(key in o, f"{tname}: no {key}")
            name = o["metadata"].get("name", "")
            need(re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= 63,
                 f"{tname}: {name!r} is not a valid object name")
            for k, v in (o["metadata"].get("labels") or {}).items():
                need(isinstance(v, str) and len(v) <= 63 and re.fullmatch(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]?", v),
                     f"{tname}: label {k}={v!r} is not a valid label value")
            by_kind.setdefault(o["kind"], []).append(o)

        def one(kind, component=None):
            found = [o for o in by_kind.get(kind, [])
                     if component is None or o["metadata"]["labels"].get("app.kubernetes.io/component") == component]
            need(len(found) == 1, f"expected one {kind} {component or ''}, found {len(found)}")
            return found[0]

        w, c = values["workers"], values["coordinator"]
        deploy, sts = one("Deployment", "coordinator"), one("StatefulSet", "worker")
        services = by_kind.get("Service", [])
        need(len(services) == 2, f"expected 2 Services, found {len(services)}")
        headless = [s for s in services if s["spec"].get("clusterIP") == "None"]
        need(len(headless) == 1, "expected exactly one headless Service (the workers')")
        headless = headless[0]
        api = [s for s in services if s is not headless][0]
        config = one("ConfigMap")

        # Pods: labels, selectors, the Services that pick them.
        for wl in (deploy, sts):
            sel = wl["spec"]["selector"]["matchLabels"]
            labels = wl["spec"]["template"]["metadata"]["labels"]
            need(sel.items() <= labels.items(), f"{wl['kind']} selector {sel} does not match its pod labels {labels}")
        coord_labels = deploy["spec"]["template"]["metadata"]["labels"]
        worker_labels = sts["spec"]["template"]["metadata"]["labels"]
        need(api["spec"]["selector"].items() <= coord_labels.items(), "the coordinator Service does not select the coordinator pod")
        need(not api["spec"]["selector"].items() <= worker_labels.items(), "the coordinator Service also selects worker pods")
        need(headless["spec"]["selector"].items() <= worker_labels.items(), "the worker Service does not select the worker pods")
        need(not headless["spec"]["selector"].items() <= coord_labels.items(), "the worker Service also selects the coordinator")
        need(headless["spec"].get("publishNotReadyAddresses") is True,
             "the worker Service must publish not-ready addresses (the coordinator assigns workers before they are Ready)")

        # The StatefulSet: its Service, ordinals as stages.
        need(sts["spec"]["serviceName"] == headless["metadata"]["name"], "StatefulSet.serviceName is not the headless Service")
        need(sts["spec"]["replicas"] == w["replicas"], f"StatefulSet replicas {sts['spec']['replicas']} != workers.replicas")
        need(sts["spec"].get("podManagementPolicy") == "Parallel", "workers must start in parallel (podManagementPolicy: Parallel)")
        need(deploy["spec"]["replicas"] == 1 and deploy["spec"]["strategy"]["type"] == "Recreate",
             "the coordinator must be a single Recreate replica")

        coord_pod, worker_pod = deploy["spec"]["template"]["spec"], sts["spec"]["template"]["spec"]
        coord = [x for x in coord_pod["containers"] if x["name"] == "coordinator"][0]
        worker = [x for x in worker_pod["containers"] if x["name"] == "worker"][0]
        cargs, wargs = [coord["command"][0]] + coord["args"], [worker["command"][0]] + worker["args"]
        need(coord["command"] == ["layerpipe-coordinator"] and worker["command"] == ["layerpipe-worker"],
             "the containers must run layerpipe-coordinator and layerpipe-worker")
        self.check_argv(cargs, "coordinator container")
        self.check_argv(wargs, "worker container")

        # The --workers list: the StatefulSet's stable DNS names, in ordinal order.
        sts_name, svc_name, wport = sts["metadata"]["name"], headless["metadata"]["name"], w["port"]
        expected = ",".join(f"{sts_name}-{i}.{svc_name}.{NAMESPACE}.svc.{values['clusterDomain']}:{wport}"
                            for i in range(w["replicas"]))
        need(flag_value(cargs, "workers") == expected,
             f"--workers is {flag_value(cargs, 'workers')!r}, expected {expected!r}")
        need(flag_value(wargs, "listen") == f"0.0.0.0:{wport}", f"worker --listen {flag_value(wargs, 'listen')!r}")
        need(flag_value(cargs, "listen") == f"0.0.0.0:{c['port']}", f"coordinator --listen {flag_value(cargs, 'listen')!r}")
        tls, metrics, auth = values["tls"], values["metrics"], values["auth"]
        # The coordinator refuses --auth-tokens or --peer-cert without a separate --peer-listen port.
        peer_on = tls["enabled"] or auth["enabled"]
        api_host = f"{api['metadata']['name']}.{NAMESPACE}.svc.{values['clusterDomain']}"
        if tls["enabled"]:
            # The peer certificate covers the Service's name, not the pod IP.
            need(flag_value(cargs, "advertise") == f"{api_host}:{c['peerPort']}",
                 f"with TLS the coordinator must advertise {api_host}:{c['peerPort']}, not {flag_value(cargs, 'advertise')!r}")
        elif auth["enabled"]:
            need(flag_value(cargs, "advertise") == f"$(POD_IP):{c['peerPort']}", "with tokens the coordinator must advertise its peer port")
        else:
            need(flag_value(cargs, "advertise") == f"$(POD_IP):{c['port']}", "the coordinator must advertise its pod IP")
        need(any(e["name"] == "POD_IP" and e["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP" for e in coord["env"]),
             "POD_IP is not set from status.podIP")
        for flag, want in (("precision", values["precision"]), ("layer-split", c["layerSplit"] or None),
                           ("startup-timeout", c["startupTimeout"]), ("recovery-deadline", c["recoveryDeadline"])):
            need(flag_value(cargs, flag) == want, f"coordinator --{flag} is {flag_value(cargs, flag)!r}, expected {want!r}")
        need(flag_value(wargs, "kv-budget") == (w["kvBudget"] or None), "worker --kv-budget does not follow workers.kvBudget")
        need(flag_value(wargs, "threads") == str(w["threads"]), "worker --threads does not follow workers.threads")

        # Ports: flag = containerPort = probe port = Service target. The native gRPC probe cannot do TLS:
        # with tls.enabled the probes must be tcpSocket probes.
        for name, ctr, port, svc in (("coordinator", coord, c["port"], api), ("worker", worker, wport, headless)):
            need([p["containerPort"] for p in ctr["ports"] if p["name"] == "grpc"] == [port], f"{name}: containerPort != {port}")
            kind, other = ("tcpSocket", "grpc") if tls["enabled"] else ("grpc", "tcpSocket")
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                need(ctr.get(probe, {}).get(kind, {}).get("port") == port and other not in ctr[probe],
                     f"{name}: {probe} is not a {kind} probe on {port}")
            want = ["grpc"] + (["peer"] if svc is api and peer_on else []) + (["metrics"] if metrics["enabled"] else [])
            need([p["targetPort"] for p in svc["spec"]["ports"]] == want,
                 f"{name} Service targets {[p['targetPort'] for p in svc['spec']['ports']]}, expected {want}")
        need(headless["spec"]["ports"][0]["port"] == wport, "the worker Service port differs from workers.port")
        need(api["spec"]["ports"][0]["port"] == c["service"]["port"], "the coordinator Service port differs from its value")
        self.check_security_and_metrics(values, by_kind, deploy, sts, coord, worker, cargs, wargs, api, headless)
        # The coordinator may take --startup-timeout to reach its workers plus one assignment to map weights.
        sp = coord["startupProbe"]
        need(sp["periodSeconds"] * sp["failureThreshold"] >= parse_duration(c["startupTimeout"]) + ASSIGN_TIMEOUT_S,
             "the coordinator's startupProbe gives up before --startup-timeout plus the 10-minute assignment")

        # Flagfiles: in the ConfigMap, mounted, read last.
        for ctr, args, program, key in ((coord, cargs, "layerpipe-coordinator", "coordinator.flags"),
                                        (worker, wargs, "layerpipe-worker", "worker.flags")):
            need(args[-1] == f"--flagfile=/etc/layerpipe/config/{key}", f"{program}: the flagfile must come last")
            need(key in config["data"], f"ConfigMap has no {key}")
            self.check_flag_lines(config["data"][key] or "", program, f"ConfigMap {key}")
        extra = values["coordinator"]["extraFlags"]
        need([l for l in (config["data"]["coordinator.flags"] or "").splitlines() if l.strip()] == extra,
             "coordinator.flags does not hold coordinator.extraFlags")
        need(config["data"].get("check-model.sh") == read(os.path.join(self.chart, "files", "check-model.sh")),
             "the ConfigMap's check-model.sh differs from files/check-model.sh")
        sums = {p["metadata"]["annotations"]["checksum/config"] for p in (deploy["spec"]["template"], sts["spec"]["template"])}
        need(len(sums) == 1, "the pods' checksum/config annotations differ")

        # Volumes: the model read-only at one path, the config, the secret.
        mount_path = values["model"]["mountPath"]
        for wl, pod in ((deploy, coord_pod), (sts, worker_pod)):
            vols = {v["name"]: v for v in pod["volumes"]}
            model = vols.get("model")
            need(model, f"{wl['kind']}: no model volume")
            if values["model"]["source"] == "pvc":
                need(model.get("persistentVolumeClaim") == {"claimName": values["model"]["pvc"]["claimName"], "readOnly": True},
                     f"{wl['kind']}: the model volume is not the read-only PVC {values['model']['pvc']['claimName']}")
            else:
                need(model.get("hostPath", {}).get("path") == values["model"]["hostPath"]["path"],
                     f"{wl['kind']}: the model volume is not hostPath {values['model']['hostPath']['path']}")
            inits = pod.get("initContainers", [])
            need(bool(inits) == values["model"]["validate"]["enabled"], f"{wl['kind']}: init container vs model.validate.enabled")
            for ctr in pod["containers"] + inits:
                mounts = {m["name"]: m for m in ctr.get("volumeMounts", [])}
                m = mounts.get("model")
                need(m and m["mountPath"] == mount_path and m.get("readOnly") is True,
                     f"{wl['kind']}/{ctr['name']}: the model is not mounted read-only at {mount_path}")
                need(m.get("subPath", "") == values["model"]["subPath"], f"{wl['kind']}/{ctr['name']}: subPath")
                need(mounts.get("config", {}).get("mountPath") == "/etc/layerpipe/config", f"{wl['kind']}/{ctr['name']}: config mount")
                secret_on = bool(values["secret"]["create"] or values["secret"]["existingSecret"])
                need(("secret" in mounts) == secret_on, f"{wl['kind']}/{ctr['name']}: the secret mount does not follow the values")
                if secret_on:
                    need(mounts["secret"]["mountPath"] == values["secret"]["mountPath"] and mounts["secret"]["readOnly"],
                         f"{wl['kind']}/{ctr['name']}: the secret is not mounted read-only at secret.mountPath")
            for init in inits:
                need(init["command"] == ["/bin/sh", "/etc/layerpipe/config/check-model.sh"] and init["args"][-1] == mount_path,
                     f"{wl['kind']}: the init container does not check {mount_path}")
                # The coordinator reads the JSON files (and the tokenizer); a worker reads the weights.
                want = ({"--no-weights"} | ({"--tokenizer"} if values["model"]["validate"]["requireTokenizer"] else set())
                        if wl is deploy else set())
                need(set(init["args"][:-1]) == want, f"{wl['kind']}: the init container checks with {init['args'][:-1]}, expected {want}")
            if values["secret"]["create"] or values["secret"]["existingSecret"]:
                want = values["secret"]["existingSecret"] or one("Secret")["metadata"]["name"]
                need(vols["secret"]["secret"]["secretName"] == want, f"{wl['kind']}: the secret volume names {vols['secret']}")
        if values["secret"]["create"]:
            data = {k: base64.b64decode(v).decode() for k, v in (one("Secret").get("data") or {}).items()}
            need(data == values["secret"]["data"], "the Secret's data differs from secret.data")
        else:
            need("Secret" not in by_kind, "a Secret is created although secret.create is false")

        # GPUs only when asked, with the GPU image.
        gpu = w["gpu"]
        res = worker.get("resources", {})
        for part in ("requests", "limits"):
            got = (res.get(part) or {}).get(gpu["resourceName"])
            if gpu["enabled"]:
                need(got == gpu["count"], f"GPU workers: resources.{part}[{gpu['resourceName']}] is {got!r}")
            else:
                need(got is None, f"CPU workers request {gpu['resourceName']}")
            for k, v in (w["resources"].get(part) or {}).items():
                need((res.get(part) or {}).get(k) == v, f"worker resources.{part}.{k} does not follow the values")
        image = gpu["image"] if gpu["enabled"] else values["image"]
        want_image = f"{image['repository']}:{image['tag'] or values_app_version(self.chart)}"
        need(worker["image"] == want_image, f"worker image {worker['image']!r}, expected {want_image!r}")
        need(worker_pod.get("runtimeClassName") == (gpu["runtimeClassName"] or None if gpu["enabled"] else None),
             "runtimeClassName does not follow workers.gpu")
        for pod, vals in ((coord_pod, c), (worker_pod, w)):
            for key in ("nodeSelector", "tolerations", "affinity"):
                need(pod.get(key) == (vals[key] or None), f"{key} does not follow the values")
            need(pod.get("automountServiceAccountToken") is False, "pods must not mount a service account token")

        # PDBs.
        pdbs = by_kind.get("PodDisruptionBudget", [])
        need(len(pdbs) == int(w["pdb"]["enabled"]) + int(c["pdb"]["enabled"]), "PodDisruptionBudgets do not follow pdb.enabled")
        for pdb in pdbs:
            labels = coord_labels if pdb["metadata"]["labels"]["app.kubernetes.io/component"] == "coordinator" else worker_labels
            need(pdb["spec"]["selector"]["matchLabels"].items() <= labels.items(), f"PDB {pdb['metadata']['name']} selects nothing")

        # `helm test` and NOTES.
        test_pod = one("Pod", "test")
        need(test_pod["metadata"]["annotations"].get("helm.sh/hook") == "test", "the test pod is not a helm test hook")
        targs = test_pod["spec"]["containers"][0]["command"] + test_pod["spec"]["containers"][0]["args"]
        self.check_argv(targs, "helm test pod")
        api_addr = f"{api['metadata']['name']}.{NAMESPACE}.svc.{values['clusterDomain']}:{c['service']['port']}"
        need(flag_value(targs, "coordinator") == api_addr, f"the helm test pod calls {flag_value(targs, 'coordinator')}")
        notes = [t for n, t in rendered.items() if n.endswith("NOTES.txt")][0]
        need(f"port-forward service/{api['metadata']['name']} {c['service']['port']}:{c['service']['port']}" in notes,
             "NOTES.txt does not show the port-forward to the coordinator Service")
        need("NOT used" not in notes, "NOTES.txt still says the Secret is not used")
        need(("tcpSocket" in notes) == tls["enabled"], "NOTES.txt must say that with TLS the probes are tcpSocket probes")
        need((f":{metrics['port']}/metrics" in notes) == metrics["enabled"], "NOTES.txt must show the metrics port")
        # The test pod speaks TLS and sends a token when the coordinator wants them, from the mounted Secret.
        mount = values["secret"]["mountPath"]
        want_flags = {"tls-ca": f"{mount}/{tls['caKey']}" if tls["enabled"] else None,
                      "token-file": f"{mount}/{auth['testTokenKey']}" if auth["enabled"] else None}
        for flag, want in want_flags.items():
            need(flag_value(targs, flag) == want, f"the helm test pod's --{flag} is {flag_value(targs, flag)!r}, expected {want!r}")
        tmounts = {m["name"]: m["mountPath"] for m in test_pod["spec"]["containers"][0].get("volumeMounts", [])}
        if tls["enabled"] or auth["enabled"]:
            need(tmounts.get("secret") == mount, "the helm test pod does not mount the Secret")
            tvols = {v["name"]: v for v in test_pod["spec"].get("volumes", [])}
            need(tvols.get("secret", {}).get("secret", {}).get("secretName") == (values["secret"]["existingSecret"] or one("Secret")["metadata"]["name"]),
                 "the helm test pod's secret volume is not the chart's Secret")

    def check_security_and_metrics(self, values, by_kind, deploy, sts, coord, worker, cargs, wargs, api, headless):
        """Metrics: flag = containerPort = annotations = Service port; TLS, tokens, limits: flags and mounted files."""
        tls, metrics, auth = values["tls"], values["metrics"], values["auth"]
        mport = metrics["port"]
        for name, wl, ctr, args, svc in (("coordinator", deploy, coord, cargs, api), ("worker", sts, worker, wargs, headless)):
            ann = wl["spec"]["template"]["metadata"].get("annotations") or {}
            ports = {p["name"]: p["containerPort"] for p in ctr["ports"]}
            svc_ports = {p["name"]: p for p in svc["spec"]["ports"]}
            if metrics["enabled"]:
                listen = flag_value(args, "metrics-listen")
                need(listen == f"0.0.0.0:{mport}", f"{name}: --metrics-listen is {listen!r}, expected 0.0.0.0:{mport}")
                need(ports.get("metrics") == mport, f"{name}: containerPort metrics is {ports.get('metrics')}, --metrics-listen {listen}")
                need(ann.get("prometheus.io/scrape") == "true" and ann.get("prometheus.io/path") == "/metrics"
                     and ann.get("prometheus.io/port") == str(mport),
                     f"{name}: prometheus.io annotations {ann} disagree with --metrics-listen {listen}")
                need(svc_ports.get("metrics", {}).get("port") == mport, f"{name} Service: metrics port is not {mport}")
            else:
                need(flag_value(args, "metrics-listen") is None and "metrics" not in ports
                     and not any(k.startswith("prometheus.io/") for k in ann),
                     f"{name}: metrics flag, port or annotations although metrics.enabled is false")
        monitors = by_kind.get("ServiceMonitor", [])
        need(len(monitors) == int(metrics["enabled"] and metrics["serviceMonitor"]["enabled"]),
             "the ServiceMonitor does not follow metrics.enabled and metrics.serviceMonitor.enabled")
        for sm in monitors:
            sel = sm["spec"]["selector"]["matchLabels"]
            for svc in (api, headless):
                need(sel.items() <= svc["metadata"]["labels"].items(), f"the ServiceMonitor does not select Service {svc['metadata']['name']}")
            need([e["port"] for e in sm["spec"]["endpoints"]] == ["metrics"] and sm["spec"]["endpoints"][0]["path"] == "/metrics",
                 "the ServiceMonitor must scrape the metrics port at /metrics")
            for k, v in metrics["serviceMonitor"]["labels"].items():
                need(sm["metadata"]["labels"].get(k) == v, f"the ServiceMonitor lacks label {k}={v}")

        secret_on = bool(values["secret"]["create"] or values["secret"]["existingSecret"])
        mount = values["secret"]["mountPath"]

        def file_of(key):
            return f"{mount}/{key}"
        coord_want = {"tls-cert": None, "tls-key": None, "peer-listen": None, "peer-cert": None, "peer-key": None,
                      "peer-ca": None, "tls-client-ca": None, "auth-tokens": None, "max-concurrent-per-client": None}
        worker_want = {"tls-cert": None, "tls-key": None, "tls-ca": None}
        files = []
        peer_port = values["coordinator"]["peerPort"]
        if tls["enabled"] or auth["enabled"]:
            coord_want["peer-listen"] = f"0.0.0.0:{peer_port}"
            need({p["name"]: p["containerPort"] for p in coord["ports"]}.get("peer") == peer_port,
                 "the coordinator's peer containerPort differs from --peer-listen")
            peer = [p for p in api["spec"]["ports"] if p["name"] == "peer"]
            need(peer and peer[0]["port"] == peer_port and peer[0]["targetPort"] == "peer",
                 "the coordinator Service does not expose the peer port the coordinator advertises")
        if tls["enabled"]:
            need(secret_on, "tls.enabled renders without a Secret to read the certificates from")
            cert, key, ca = file_of(tls["certKey"]), file_of(tls["keyKey"]), file_of(tls["caKey"])
            coord_want.update({"tls-cert": cert, "tls-key": key, "peer-cert": cert, "peer-key": key, "peer-ca": ca})
            worker_want.update({"tls-cert": cert, "tls-key": key, "tls-ca": ca})
            files += [tls["certKey"], tls["keyKey"], tls["caKey"]]
        if auth["enabled"]:
            need(secret_on, "auth.enabled renders without a Secret to read the tokens from")
            coord_want["auth-tokens"] = file_of(auth["tokensKey"])
            files.append(auth["tokensKey"])
        if values["limits"]["maxConcurrentPerClient"]:
            coord_want["max-concurrent-per-client"] = str(values["limits"]["maxConcurrentPerClient"])
        for name, args, want in (("coordinator", cargs, coord_want), ("worker", wargs, worker_want)):
            for flag, value in want.items():
                need(flag_value(args, flag) == value, f"{name} --{flag} is {flag_value(args, flag)!r}, expected {value!r}")
        # The files the flags name are in the Secret the chart creates (an existing one is the user's).
        if values["secret"]["create"]:
            for f in files:
                need(f in values["secret"]["data"], f"secret.data has no {f}, which a flag reads")

    # =====================================================================================================
    # check-model.sh
    # =====================================================================================================
    def check_model_script(self):
        script = os.path.join(self.chart, "files", "check-model.sh")
        need(read(script).startswith("#!/bin/sh"), "check-model.sh must be a POSIX sh script")
        base = tempfile.mkdtemp(dir=self.work, prefix="check-model-")
        env = dict(os.environ, PATH=f"{self.bin}:{os.environ.get('PATH', '')}" if self.bin else os.environ.get("PATH", ""))

        def run(*args):
            p = subprocess.run(["/bin/sh", script, *args], capture_output=True, text=True, timeout=60, env=env)
            return p.returncode, p.stdout + p.stderr

        def fake(name, shards=("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"), index=True):
            d = os.path.join(base, name)
            os.makedirs(d)
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump({"text_config": {"num_hidden_layers": 48}}, f)
            if index:
                with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
                    json.dump({"metadata": {"total_size": 1}, "weight_map": {f"t{i}": s for i, s in enumerate(shards * 2)}}, f)
            for s in shards:
                with open(os.path.join(d, s), "wb") as f:
                    f.write(b"\x08\0\0\0\0\0\0\0{}      ")
            return d

        ok = fake("sharded")
        rc, out = run(ok)
        need(rc == 0 and "2 safetensors" in out, f"a complete sharded checkpoint is rejected: {out}")
        single = fake("single", shards=("model.safetensors",), index=False)
        need(run(single)[0] == 0, "a single-file checkpoint is rejected")
        cases = {
            "a missing shard": (lambda d: os.remove(os.path.join(d, "model-00002-of-00002.safetensors")),
                                "model-00002-of-00002.safetensors is missing"),
            "an empty shard": (lambda d: open(os.path.join(d, "model-00001-of-00002.safetensors"), "w").close(), "is empty"),
            "no config.json": (lambda d: os.remove(os.path.join(d, "config.json")), "config.json is missing"),
            "a config.json without layers": (lambda d: open(os.path.join(d, "config.json"), "w").write("{}"), "num_hidden_layers"),
            "an index naming no shard": (lambda d: open(os.path.join(d, "model.safetensors.index.json"), "w").write("{}"),
                                         "names no .safetensors"),
            "a directory as generation_config.json": (lambda d: os.mkdir(os.path.join(d, "generation_config.json")),
                                                      "generation_config.json is missing (or not a regular file)"),
        }
        for i, (what, (breakit, message)) in enumerate(cases.items()):
            d = fake(f"broken{i}")
            breakit(d)
            rc, out = run(d)
            need(rc == 1 and message in out, f"{what}: exit {rc}, {out.strip()!r} (expected 1 and {message!r})")
        rc, out = run(os.path.join(base, "absent"))
        need(rc == 1 and "not a directory" in out, "an absent directory is not reported")
        need(run()[0] == 2 and run("--tokenizer")[0] == 2 and run("--bogus", ok)[0] == 2, "bad usage must exit 2")
        weightless = fake("weightless", shards=(), index=False)
        rc, out = run("--no-weights", weightless)
        need(rc == 0, f"--no-weights wants weights: {out}")
        need(run(weightless)[0] == 1, "a checkpoint without weights passes")
        os.remove(os.path.join(weightless, "config.json"))
        need(run("--no-weights", weightless)[0] == 1, "--no-weights passes without config.json")
        rc, out = run("--tokenizer", ok)
        need(rc == 1 and "tokenizer.json is missing" in out, "--tokenizer without tokenizer.json passes")
        note = "fake layouts"
        if self.bin:
            # A real generated checkpoint, and the tokenizer check through `layerpipe tokenize`.
            real = os.path.join(base, "real")
            subprocess.run([os.path.join(self.bin, "layerpipe"), "make-checkpoint", "--out", real, *TINY_CHECKPOINT,
                            "--shards", "3"], check=True, capture_output=True, timeout=120)
            rc, out = run(real)
            need(rc == 0 and "3 safetensors" in out, f"a generated 3-shard checkpoint is rejected: {out}")
            with open(os.path.join(real, "tokenizer.json"), "w") as f:
                f.write('{"model": {"type": "BPE"}}')
            rc, out = run("--tokenizer", real)
            need(rc == 1 and "does not load" in out, f"a broken tokenizer.json passes --tokenizer: {out}")
            tok = self.path("third_party", "npm", "node_modules", "@lenml", "tokenizer-gemma3", "models", "tokenizer.json")
            if os.path.isfile(tok):
                shutil.copy(tok, os.path.join(real, "tokenizer.json"))
                rc, out = run("--tokenizer", real)
                need(rc == 0, f"the real Gemma tokenizer.json fails --tokenizer: {out}")
                rc, out = run("--no-weights", "--tokenizer", real)
                need(rc == 0, f"the coordinator's check fails: {out}")
                note = "fake layouts, a generated checkpoint, the real tokenizer"
            else:
                note = "fake layouts, a generated checkpoint (no reference tokenizer.json: scripts/fetch_tokenizer.sh)"
        shutil.rmtree(base, ignore_errors=True)
        return note

    # =====================================================================================================
    # Compose
    # =====================================================================================================
    def compose(self, env=None):
        text = read(self.path("deploy", "docker-compose.yml"))
        env = {"LAYERPIPE_MODEL_DIR": "/srv/models/gemma-4-12b", **(env or {})}
        return yaml.safe_load(interpolate(text, env)), env

    def check_compose(self):
        doc, _ = self.compose()
        need(interpolate_raises(read(self.path("deploy", "docker-compose.yml")), {}),
             "LAYERPIPE_MODEL_DIR must be required (${LAYERPIPE_MODEL_DIR:?...})")
        services = doc["services"]
        need({"coordinator", "worker-0", "worker-1"} <= set(services), "compose needs coordinator, worker-0 and worker-1")
        model_mounts = set()
        listen = {}
        metrics_hosts = []
        for name, svc in services.items():
            need(isinstance(svc.get("command"), list), f"{name}: command must be a list")
            program = self.check_argv(svc["command"], f"compose {name}")
            build = svc.get("build", {})
            need(os.path.isfile(os.path.join(self.path("deploy"), build.get("context", "."), build.get("dockerfile", ""))),
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
                    self.check_argv(test[1:], f"compose {name} healthcheck")
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

    # =====================================================================================================
    # systemd
    # =====================================================================================================
    def units(self):
        d = self.path("deploy", "systemd")
        return {f: parse_unit(read(os.path.join(d, f))) for f in sorted(os.listdir(d)) if f.endswith((".service", ".target"))}

    def env_file(self, name):
        env = {}
        for line in read(self.path("deploy", "systemd", name)).splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                k, _, v = line.partition("=")
                env[k] = v
        return env

    def unit_commands(self, unit_name, unit, instance):
        """ExecStartPre/ExecStart argv with %i and the shipped env files' variables expanded."""
        env = {}
        for ef in unit["Service"].get("EnvironmentFile", []):
            optional = ef.startswith("-")
            base = os.path.basename(ef.lstrip("-")).replace("%i", instance)
            if os.path.isfile(self.path("deploy", "systemd", base)):
                env.update(self.env_file(base))
            else:
                need(optional, f"{unit_name}: EnvironmentFile {ef} is not shipped in deploy/systemd")
        cmds = {}
        for key in ("ExecStartPre", "ExecStart"):
            for line in unit["Service"].get(key, []):
                cmds.setdefault(key, []).append(expand_unit_command(line.replace("%i", instance), env, unit_name))
        return cmds, env

    def check_systemd(self):
        units = self.units()
        need({"layerpipe-coordinator.service", "layerpipe-worker@.service"} <= set(units), "the two service units are missing")
        for name, unit in units.items():
            if not name.endswith(".service"):
                continue
            instance = "7001" if "@" in name else ""
            cmds, env = self.unit_commands(name, unit, instance)
            need(len(cmds.get("ExecStart", [])) == 1, f"{name}: one ExecStart expected")
            argv = cmds["ExecStart"][0]
            need(argv[0].startswith("/usr/local/bin/"), f"{name}: ExecStart must name /usr/local/bin/<binary>")
            program = self.check_argv(argv, f"{name} ExecStart")
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
        coord_env = self.env_file("coordinator.env")
        worker_ports = {w.rsplit(":", 1)[1] for w in coord_env["LAYERPIPE_WORKERS"].split(",")}
        need(len(worker_ports) == len(coord_env["LAYERPIPE_WORKERS"].split(",")), "coordinator.env: worker ports repeat")
        need(coord_env["LAYERPIPE_MODEL"] == self.env_file("worker.env")["LAYERPIPE_MODEL"],
             "coordinator.env and worker.env must name the same model path")
        note = f"{len(units)} units"
        analyze = shutil.which("systemd-analyze")
        if analyze:
            note += ", " + self.systemd_analyze(analyze, units)
        else:
            note += " (systemd-analyze not installed: unit syntax checked by this script only)"
        return note

    def systemd_analyze(self, analyze, units):
        """systemd-analyze verify on copies whose binaries and env files point into this tree."""
        d = tempfile.mkdtemp(dir=self.work, prefix="units-")
        for f in ("coordinator.env", "worker.env"):
            shutil.copy(self.path("deploy", "systemd", f), d)
        exe_dir = self.bin or "/bin"
        names = []
        for name in units:
            text = read(self.path("deploy", "systemd", name))
            text = text.replace("/usr/local/bin/layerpipe-check-model", os.path.join(self.chart, "files", "check-model.sh"))
            text = re.sub(r"/usr/local/bin/(layerpipe[-\w]*)",
                          lambda m: os.path.join(exe_dir, m.group(1)) if self.bin else "/bin/true", text)
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

    # =====================================================================================================
    # Dockerfiles and packages
    # =====================================================================================================
    def check_dockerfiles(self):
        targets = set()
        for d in ("coordinator", "worker", "cli"):
            targets |= set(re.findall(r"add_executable\(\s*([\w-]+)", read(self.path(d, "CMakeLists.txt"))))
        need(set(BINARIES) <= targets, f"CMake does not define {set(BINARIES) - targets}")
        for name, build_base, runtime_base in (("Dockerfile.cpu", r"debian:bookworm$", r"debian:bookworm-slim$"),
                                               ("Dockerfile.cuda", r"nvidia/cuda:13\.[\d.]+-devel-ubuntu[\d.]+$",
                                                r"nvidia/cuda:13\.[\d.]+-runtime-ubuntu[\d.]+$")):
            stages = parse_dockerfile(read(self.path("deploy", name)))
            need([s["name"] for s in stages] == ["build", "runtime"], f"{name}: stages must be build then runtime")
            build, runtime = stages
            need(re.match(build_base, build["from"]), f"{name}: build stage is FROM {build['from']}")
            need(re.match(runtime_base, runtime["from"]), f"{name}: runtime stage is FROM {runtime['from']}")
            build_runs = " ".join(build["RUN"])
            for script in ("scripts/install_deps.sh", "scripts/build.sh", "deploy/runtime-packages.sh",
                           "helm/layerpipe/files/check-model.sh"):
                need(script in build_runs, f"{name}: the build stage does not use {script}")
                need(os.path.isfile(self.path(script)), f"{name}: {script} does not exist")
            copied = set(re.findall(r"build/bin/([\w-]+)", build_runs))
            for b in BINARIES:
                need(b in copied, f"{name}: {b} is not copied out of build/bin")
            need(any("--from=build" in c for c in runtime["COPY"]), f"{name}: the runtime stage copies nothing from the build")
            need(runtime.get("USER") and runtime["USER"][-1].split(":")[0] not in ("0", "root"), f"{name}: the image runs as root")
            need(any("not found" in r for r in runtime["RUN"]), f"{name}: the runtime stage does not check for missing libraries")
            ignore = read(self.path("deploy", name + ".dockerignore")).split()
            need("build" in ignore and "third_party/npm" in ignore, f"{name}.dockerignore must exclude build and third_party/npm")
        note = "2 Dockerfiles"
        if self.bin and shutil.which("dpkg-query"):
            p = subprocess.run(["sh", self.path("deploy", "runtime-packages.sh"), *[os.path.join(self.bin, b) for b in BINARIES]],
                               capture_output=True, text=True, timeout=120)
            need(p.returncode == 0, f"runtime-packages.sh failed: {p.stderr}")
            pkgs = {l.split(":")[0] for l in p.stdout.split()}
            for want in ("libgrpc++", "libprotobuf", "libabsl"):
                need(any(x.startswith(want) for x in pkgs), f"runtime-packages.sh lists no {want}* package: {sorted(pkgs)}")
            note += f"; runtime packages here: {' '.join(sorted(pkgs))}"
        return note

    # =====================================================================================================
    # Sizing
    # =====================================================================================================
    def check_sizing(self):
        sys.path.insert(0, self.path("deploy"))
        try:
            import importlib
            sizing = importlib.import_module("sizing")
            importlib.reload(sizing)
        finally:
            sys.path.pop(0)
        # MODEL.md: 40 sliding x 14 + 8 full x 13 decoder tensors, 21,801,427,040 bytes; 4 GiB of global cache per
        # sequence at 262,144 tokens on top of the sliding layers' fixed rings.
        decoder = sum(sizing.LAYER_BYTES[t] for t in sizing.LAYER_TYPES)
        need(decoder == 21_801_427_040, f"decoder weights {decoder} != MODEL.md's 21,801,427,040 bytes")
        need(sizing.kv_bytes(0, 48, 262144) - 40 * 1024 * 2 * 8 * 256 * 2 == 4 << 30, "full-layer KV at 262,144 tokens != 4 GiB")
        # PlanLayerRanges of coordinator/planner.cc for the 12B config, as the C++ computed it when the port was
        # written; a change of the planner shows here.
        for workers, split in ((2, "0-25,26-47"), (4, "0-12,13-25,26-38,39-47"),
                               (8, "0-5,6-11,12-17,18-24,25-31,32-38,39-45,46-47")):
            got = ",".join(f"{b}-{e - 1}" for b, e in sizing.plan_layer_ranges(workers))
            need(got == split, f"the planner port splits {workers} workers as {got}, the coordinator as {split}")
        p = subprocess.run([sys.executable, self.path("deploy", "sizing.py"), "--check", self.path("docs", "deploy.md")],
                           capture_output=True, text=True, timeout=60)
        need(p.returncode == 0, f"docs/deploy.md: {p.stderr.strip()}")
        return "docs/deploy.md tables match"

    # =====================================================================================================
    # Smoke: the real command lines start a real pipeline
    # =====================================================================================================
    def check_smoke(self):
        if not self.smoke:
            return "skipped (--no-smoke)"
        if not self.bin:
            return "skipped: no built binaries (build/bin)"
        model = os.path.join(self.work, "smoke-model")
        shutil.rmtree(model, ignore_errors=True)
        subprocess.run([os.path.join(self.bin, "layerpipe"), "make-checkpoint", "--out", model, *TINY_CHECKPOINT,
                        "--shards", "2"], check=True, capture_output=True, timeout=120)
        runs = []
        # The chart, defaults and the GPU example: container command + args, flagfiles from the ConfigMap.
        for scenario in ("defaults", "ci/gpu-values.yaml", "ci/tls-values.yaml"):
            values, rendered, objects, _ = self.rendered[scenario]
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
                pki = make_test_secret(os.path.join(self.work, "smoke-secret"), values)
                mount = values["secret"]["mountPath"] + "/"
                cargv, wargv, targv = ([a.replace(mount, pki["dir"] + "/") for a in argv] for argv in (cargv, wargv, targv))
            runs.append((f"chart {scenario}", cargv, [wargv] * values["workers"]["replicas"],
                         {"coordinator.flags": config["coordinator.flags"], "worker.flags": config["worker.flags"]},
                         [targv], pki))
        # Compose.
        doc, _ = self.compose()
        svcs = doc["services"]
        workers = flag_value(svcs["coordinator"]["command"], "workers").split(",")
        runs.append(("compose", svcs["coordinator"]["command"], [svcs[w.rsplit(":", 1)[0]]["command"] for w in workers], {},
                     [svcs["coordinator"]["healthcheck"]["test"][1:]], None))
        # systemd: one worker instance per port of LAYERPIPE_WORKERS.
        units = self.units()
        ccmd, cenv = self.unit_commands("layerpipe-coordinator.service", units["layerpipe-coordinator.service"], "")
        wcmds = [self.unit_commands("layerpipe-worker@.service", units["layerpipe-worker@.service"], w.rsplit(":", 1)[1])[0]["ExecStart"][0]
                 for w in cenv["LAYERPIPE_WORKERS"].split(",")]
        runs.append(("systemd", ccmd["ExecStart"][0], wcmds, {}, [], None))
        notes = []
        for name, cargv, wargvs, flagfiles, clients, pki in runs:
            notes.append(self.smoke_run(name, model, cargv, wargvs, flagfiles, clients, pki))
        shutil.rmtree(model, ignore_errors=True)
        return "; ".join(notes)

    def smoke_run(self, name, model, cargv, wargvs, flagfiles, clients, pki=None):
        d = tempfile.mkdtemp(dir=self.work, prefix="smoke-")
        for fname, text in flagfiles.items():
            with open(os.path.join(d, fname), "w") as f:
                f.write(text or "")

        def rewrite(argv, replace):
            out = [os.path.join(self.bin, os.path.basename(argv[0]))]
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
            coord = start(rewrite(cargv, {"listen": f"127.0.0.1:{cport}", "advertise": None, "model": model, **peer,
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
                argv = [os.path.join(self.bin, client[0])] + [
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
                f.close()
            shutil.rmtree(d, ignore_errors=True)


# A 48-layer checkpoint with the 12B's layer pattern (so every split of the real model applies) and tiny shapes.
TINY_CHECKPOINT = ["--layers", "48", "--hidden", "64", "--intermediate", "128", "--vocab", "512", "--heads", "2",
                   "--head-dim", "32", "--kv-heads", "1", "--global-head-dim", "64", "--global-kv-heads", "1",
                   "--window", "16"]


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


def values_app_version(chart_dir):
    return str(yaml.safe_load(read(os.path.join(chart_dir, "Chart.yaml")))["appVersion"])


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


# ---------------------------------------------------------------------------------------------------------
# Small parsers: compose interpolation, systemd units, Dockerfiles
# ---------------------------------------------------------------------------------------------------------

_INTERP = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def interpolate(text, env):
    """Compose's variable substitution: ${V}, ${V:-default}, ${V-default}, ${V:?error}, ${V?error}, $V, $$."""
    def sub(m):
        if m.group(0) == "$$":
            return "$"
        name = m.group(1) or m.group(4)
        op, arg = m.group(2), m.group(3)
        value = env.get(name)
        if op in (":-", "-"):
            return arg if value is None or (op == ":-" and value == "") else value
        if op in (":?", "?"):
            if value is None or (op == ":?" and value == ""):
                raise Fail(f"required variable {name}: {arg}")
            return value
        return value or ""
    return _INTERP.sub(sub, text)


def interpolate_raises(text, env):
    try:
        interpolate(text, env)
        return False
    except Fail:
        return True


def parse_unit(text):
    """{section: {key: [values]}} with line continuations joined."""
    sections, current = {}, None
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].rstrip()
        while line.endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line[:-1] + " " + lines[i].strip()
        i += 1
        s = line.strip()
        if not s or s.startswith(("#", ";")):
            continue
        m = re.fullmatch(r"\[([A-Za-z]+)\]", s)
        if m:
            current = sections.setdefault(m.group(1), {})
            continue
        need(current is not None and "=" in s, f"unit line outside a section or without '=': {s!r}")
        k, _, v = s.partition("=")
        current.setdefault(k.strip(), []).append(v.strip())
    return sections


def expand_unit_command(line, env, where):
    """systemd's expansion: ${V} is one word, $V splits on whitespace; a variable no env file defines is an error."""
    prefix = re.match(r"^[-@:+!]*", line).group(0)
    words = []
    for word in shlex.split(line[len(prefix):]):
        m = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if m:
            need(m.group(1) in env, f"{where}: ${m.group(1)} is not defined by its EnvironmentFile")
            words.extend(env[m.group(1)].split())
            continue

        def sub(mm):
            need(mm.group(1) in env, f"{where}: ${{{mm.group(1)}}} is not defined by its EnvironmentFile")
            return env[mm.group(1)]
        words.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", sub, word))
    return words


def parse_dockerfile(text):
    """[{name, from, RUN: [...], COPY: [...], USER: [...]}] with ARG defaults substituted in FROM."""
    args, stages = {}, []
    logical = re.sub(r"\\\n", " ", text)
    for line in logical.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        instr, _, rest = s.partition(" ")
        instr = instr.upper()
        if instr == "ARG" and not stages:
            k, _, v = rest.partition("=")
            args[k.strip()] = v.strip()
        elif instr == "FROM":
            m = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", rest.strip(), re.I)
            need(m, f"bad FROM {rest!r}")
            image = re.sub(r"\$\{(\w+)\}", lambda mm: args.get(mm.group(1), ""), m.group(1))
            stages.append({"name": m.group(2), "from": image, "RUN": [], "COPY": [], "USER": []})
        elif stages and instr in ("RUN", "COPY", "USER"):
            stages[-1][instr].append(rest)
    return stages


# ---------------------------------------------------------------------------------------------------------
# Self-test: the checker fails on injected errors
# ---------------------------------------------------------------------------------------------------------

def self_test(src, bin_dir, work):
    """Each mutation breaks one file of a copy of the tree; the checker must then fail, naming the problem."""
    mutations = [
        ("a YAML indentation error in a template", "helm/layerpipe/templates/worker-service.yaml",
         "  clusterIP: None\n", "  clusterIP: None\n   publishNotReadyAddresses: false\n", "not valid YAML"),
        ("a duplicate key in a template", "helm/layerpipe/templates/coordinator-service.yaml",
         "  type: {{", "  selector: {}\n  type: {{", "duplicate key"),
        ("a .Values path missing from values.yaml", "helm/layerpipe/templates/worker-statefulset.yaml",
         "$w.terminationGracePeriodSeconds", "$w.terminationGracePeriod", "terminationGracePeriod"),
        ("a misspelt function", "helm/layerpipe/templates/coordinator-pdb.yaml", "| nindent 4", "| nindnet 4",
         "not defined"),
        ("an unclosed if", "helm/layerpipe/templates/secret.yaml", "{{- end }}\n{{- if .Values.secret.create }}",
         "{{- if .Values.secret.create }}", "missing"),
        ("printf %d of a float64 value", "helm/layerpipe/templates/_helpers.tpl", "(int $.Values.workers.port)",
         "$.Values.workers.port", "%!d(float64"),
        ("workers.replicas: \"two\"", "helm/layerpipe/values.yaml", "  replicas: 2\n", "  replicas: \"two\"\n",
         "values.yaml is rejected"),
        ("an unknown coordinator flag in compose", "deploy/docker-compose.yml", "--startup-timeout=10m",
         "--start-timeout=10m", "has no flag --start-timeout"),
        ("a dashed flag name in a flagfile", "helm/layerpipe/ci/gpu-values.yaml", "- --max_batch=32",
         "- --max-batch=32", "ci/gpu-values.yaml is rejected"),
        ("an unknown worker flag in a systemd unit", "deploy/systemd/layerpipe-worker@.service",
         "--threads=${LAYERPIPE_THREADS}", "--cores=${LAYERPIPE_THREADS}", "has no flag --cores"),
        ("a variable no env file defines", "deploy/systemd/layerpipe-coordinator.service",
         "${LAYERPIPE_PRECISION}", "${LAYERPIPE_PRECISON}", "LAYERPIPE_PRECISON"),
        ("a stale sizing table", "docs/deploy.md", "| 24 (2 workers) | 20 + 4 | 10.15 |", "| 24 (2 workers) | 20 + 4 | 10.25 |",
         "sizing tables differ"),
        ("a binary the build does not make", "deploy/Dockerfile.cpu", "build/bin/layerpipe-worker /out/bin/",
         "build/bin/layerpipe-server /out/bin/", "layerpipe-worker is not copied"),
        ("gRPC probes kept with TLS on", "helm/layerpipe/templates/_helpers.tpl",
         "{{- if .ctx.Values.tls.enabled -}}", "{{- if false -}}", "is not a tcpSocket probe"),
        ("a metrics annotation that ignores metrics.port", "helm/layerpipe/templates/_helpers.tpl",
         "prometheus.io/port: {{ .Values.metrics.port | quote }}", 'prometheus.io/port: "9100"', "prometheus.io annotations"),
        ("TLS files left unmounted in the helm test pod", "helm/layerpipe/templates/tests/test-generate.yaml",
         "      {{- if or .Values.tls.enabled .Values.auth.enabled }}\n      volumeMounts:",
         "      {{- if false }}\n      volumeMounts:", "does not mount the Secret"),
        ("check-model.sh ignoring shards", "helm/layerpipe/files/check-model.sh", '    need_file "$dir/$shard"\n',
         "    :\n", "missing shard"),
    ]
    failures = []
    for what, rel, old, new, expect in mutations:
        tree = tempfile.mkdtemp(dir=work, prefix="mutant-")
        for d in ("helm", "deploy", "docs", "scripts", "coordinator", "worker", "cli", "tests/deploy"):
            shutil.copytree(os.path.join(src, d), os.path.join(tree, d), ignore=shutil.ignore_patterns("__pycache__"))
        path = os.path.join(tree, rel)
        text = read(path)
        if old not in text:
            failures.append(f"{what}: the text to mutate is gone from {rel} ({old!r}); update the self-test")
            shutil.rmtree(tree, ignore_errors=True)
            continue
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.replace(old, new, 1))
        argv = [sys.executable, os.path.join(tree, "tests", "deploy", "check_deploy.py"), "--src", tree,
                "--work", os.path.join(tree, "work"), "--no-smoke"]
        if bin_dir:
            argv += ["--bin", bin_dir]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        out = p.stdout + p.stderr
        if p.returncode == 0:
            failures.append(f"{what}: the checker passed")
        elif expect not in out:
            failures.append(f"{what}: the checker failed without mentioning {expect!r}:\n{out[-3000:]}")
        else:
            print(f"PASS caught {what}", flush=True)
        shutil.rmtree(tree, ignore_errors=True)
    for f in failures:
        print(f"FAIL {f}", flush=True)
    print(f"{len(mutations) - len(failures)} passed, {len(failures)} failed", flush=True)
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."),
                    help="repository root")
    ap.add_argument("--bin", help="directory of the built binaries (default: SRC/build/bin when present)")
    ap.add_argument("--work", help="scratch directory (default: a temporary one)")
    ap.add_argument("--no-smoke", action="store_true", help="do not start the binaries")
    ap.add_argument("--self-test", action="store_true", help="check that injected errors are caught")
    args = ap.parse_args()
    src = os.path.abspath(args.src)
    bin_dir = args.bin or os.path.join(src, "build", "bin")
    work = args.work or tempfile.mkdtemp(prefix="layerpipe-deploy-")
    os.makedirs(work, exist_ok=True)
    if args.self_test:
        return self_test(src, bin_dir if os.path.isdir(bin_dir) else None, work)
    checker = Checker(src, bin_dir, work, smoke=not args.no_smoke)
    print(f"binaries: {checker.bin or 'none (flags from the source)'}", flush=True)
    checker.run("chart metadata", checker.check_chart_metadata)
    checker.run("values schema", checker.check_schema)
    checker.run("values paths in templates", checker.check_values_paths)
    checker.run("chart renders and hangs together", checker.check_render)
    checker.run("check-model.sh", checker.check_model_script)
    checker.run("docker-compose.yml", checker.check_compose)
    checker.run("systemd units", checker.check_systemd)
    checker.run("Dockerfiles", checker.check_dockerfiles)
    checker.run("sizing tables", checker.check_sizing)
    if checker.rendered.get("defaults") and checker.rendered.get("ci/gpu-values.yaml"):
        checker.run("smoke: the deployments' command lines run a pipeline", checker.check_smoke)
    else:
        checker.failed.append("smoke")
        print("FAIL smoke: the chart did not render", flush=True)
    print(f"{checker.passed} passed, {len(checker.failed)} failed", flush=True)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if checker.failed else 0


if __name__ == "__main__":
    sys.exit(main())
