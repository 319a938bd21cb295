"""Cross-object checks on what `helm template` rendered for one scenario: names and labels are valid, selectors
match pod labels, the StatefulSet's headless Service, the coordinator's --workers list is exactly the
StatefulSet's stable DNS names, ports agree between flags, containers, probes and Services, flagfiles, the
model volume read-only at one path, the Secret, GPUs, PDBs, the `helm test` pod and NOTES.txt. Metrics and
TLS/tokens: chart_security."""
import base64
import os
import re

import yaml

import chart_security
from flags import flag_value
from util import NAMESPACE, need, parse_duration, read

# What coordinator/pipeline.cc allows one assignment (mapping the weights) on top of --startup-timeout.
ASSIGN_TIMEOUT_S = 600


class Objects:
    """One scenario's objects by kind, and the parts the checks look at."""

    def __init__(self, ctx, rendering):
        self.ctx, self.values, self.notes = ctx, rendering.values, rendering.notes
        self.by_kind = {}
        for tname, o in rendering.objects:
            for key in ("apiVersion", "kind", "metadata"):
                need(key in o, f"{tname}: no {key}")
            name = o["metadata"].get("name", "")
            need(re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= 63,
                 f"{tname}: {name!r} is not a valid object name")
            for k, v in (o["metadata"].get("labels") or {}).items():
                need(isinstance(v, str) and len(v) <= 63 and re.fullmatch(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]?", v),
                     f"{tname}: label {k}={v!r} is not a valid label value")
            self.by_kind.setdefault(o["kind"], []).append(o)
        self.w, self.c = self.values["workers"], self.values["coordinator"]
        self.deploy, self.sts = self.one("Deployment", "coordinator"), self.one("StatefulSet", "worker")
        services = self.by_kind.get("Service", [])
        need(len(services) == 2, f"expected 2 Services, found {len(services)}")
        headless = [s for s in services if s["spec"].get("clusterIP") == "None"]
        need(len(headless) == 1, "expected exactly one headless Service (the workers')")
        self.headless = headless[0]
        self.api = [s for s in services if s is not self.headless][0]
        self.config = self.one("ConfigMap")
        self.coord_pod, self.worker_pod = self.deploy["spec"]["template"]["spec"], self.sts["spec"]["template"]["spec"]
        self.coord = [x for x in self.coord_pod["containers"] if x["name"] == "coordinator"][0]
        self.worker = [x for x in self.worker_pod["containers"] if x["name"] == "worker"][0]
        self.cargs = [self.coord["command"][0]] + self.coord["args"]
        self.wargs = [self.worker["command"][0]] + self.worker["args"]
        self.coord_labels = self.deploy["spec"]["template"]["metadata"]["labels"]
        self.worker_labels = self.sts["spec"]["template"]["metadata"]["labels"]
        self.secret_on = bool(self.values["secret"]["create"] or self.values["secret"]["existingSecret"])

    def one(self, kind, component=None):
        found = [o for o in self.by_kind.get(kind, [])
                 if component is None or o["metadata"]["labels"].get("app.kubernetes.io/component") == component]
        need(len(found) == 1, f"expected one {kind} {component or ''}, found {len(found)}")
        return found[0]

    def secret_name(self):
        return self.values["secret"]["existingSecret"] or self.one("Secret")["metadata"]["name"]


def check_objects(ctx, rendering):
    o = Objects(ctx, rendering)
    for check in (check_selectors, check_command_lines, check_ports, chart_security.check_metrics,
                  chart_security.check_tls_and_tokens, check_flagfiles, check_volumes, check_secret, check_scheduling,
                  check_pdbs, check_helm_test_and_notes):
        check(o)


def check_selectors(o):
    """Pods: labels, selectors, the Services that pick them; the StatefulSet: its Service, ordinals as stages."""
    api, headless, sts, deploy = o.api, o.headless, o.sts, o.deploy
    for wl in (deploy, sts):
        sel = wl["spec"]["selector"]["matchLabels"]
        labels = wl["spec"]["template"]["metadata"]["labels"]
        need(sel.items() <= labels.items(), f"{wl['kind']} selector {sel} does not match its pod labels {labels}")
    need(api["spec"]["selector"].items() <= o.coord_labels.items(), "the coordinator Service does not select the coordinator pod")
    need(not api["spec"]["selector"].items() <= o.worker_labels.items(), "the coordinator Service also selects worker pods")
    need(headless["spec"]["selector"].items() <= o.worker_labels.items(), "the worker Service does not select the worker pods")
    need(not headless["spec"]["selector"].items() <= o.coord_labels.items(), "the worker Service also selects the coordinator")
    need(headless["spec"].get("publishNotReadyAddresses") is True,
         "the worker Service must publish not-ready addresses (the coordinator assigns workers before they are Ready)")
    need(sts["spec"]["serviceName"] == headless["metadata"]["name"], "StatefulSet.serviceName is not the headless Service")
    need(sts["spec"]["replicas"] == o.w["replicas"], f"StatefulSet replicas {sts['spec']['replicas']} != workers.replicas")
    need(sts["spec"].get("podManagementPolicy") == "Parallel", "workers must start in parallel (podManagementPolicy: Parallel)")
    need(deploy["spec"]["replicas"] == 1 and deploy["spec"]["strategy"]["type"] == "Recreate",
         "the coordinator must be a single Recreate replica")


def check_command_lines(o):
    """The programs, their flags, the --workers list (the StatefulSet's stable DNS names in ordinal order)."""
    values, w, c, cargs, wargs = o.values, o.w, o.c, o.cargs, o.wargs
    need(o.coord["command"] == ["layerpipe-coordinator"] and o.worker["command"] == ["layerpipe-worker"],
         "the containers must run layerpipe-coordinator and layerpipe-worker")
    o.ctx.programs.check_argv(cargs, "coordinator container")
    o.ctx.programs.check_argv(wargs, "worker container")
    sts_name, svc_name, wport = o.sts["metadata"]["name"], o.headless["metadata"]["name"], w["port"]
    expected = ",".join(f"{sts_name}-{i}.{svc_name}.{NAMESPACE}.svc.{values['clusterDomain']}:{wport}"
                        for i in range(w["replicas"]))
    need(flag_value(cargs, "workers") == expected, f"--workers is {flag_value(cargs, 'workers')!r}, expected {expected!r}")
    need(flag_value(wargs, "listen") == f"0.0.0.0:{wport}", f"worker --listen {flag_value(wargs, 'listen')!r}")
    need(flag_value(cargs, "listen") == f"0.0.0.0:{c['port']}", f"coordinator --listen {flag_value(cargs, 'listen')!r}")
    api_host = f"{o.api['metadata']['name']}.{NAMESPACE}.svc.{values['clusterDomain']}"
    if values["tls"]["enabled"]:
        # The peer certificate covers the Service's name, not the pod IP.
        need(flag_value(cargs, "advertise") == f"{api_host}:{c['peerPort']}",
             f"with TLS the coordinator must advertise {api_host}:{c['peerPort']}, not {flag_value(cargs, 'advertise')!r}")
    elif values["auth"]["enabled"]:
        need(flag_value(cargs, "advertise") == f"$(POD_IP):{c['peerPort']}", "with tokens the coordinator must advertise its peer port")
    else:
        need(flag_value(cargs, "advertise") == f"$(POD_IP):{c['port']}", "the coordinator must advertise its pod IP")
    need(any(e["name"] == "POD_IP" and e["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP" for e in o.coord["env"]),
         "POD_IP is not set from status.podIP")
    for flag, want in (("precision", values["precision"]), ("quantize", values["quantize"]),
                       ("quantize-head", values["quantizeHead"]), ("layer-split", c["layerSplit"] or None),
                       ("startup-timeout", c["startupTimeout"]), ("recovery-deadline", c["recoveryDeadline"]),
                       ("state-dir", c["jobs"]["stateDir"])):
        need(flag_value(cargs, flag) == want, f"coordinator --{flag} is {flag_value(cargs, flag)!r}, expected {want!r}")
    need(flag_value(wargs, "kv-budget") == (w["kvBudget"] or None), "worker --kv-budget does not follow workers.kvBudget")
    need(flag_value(wargs, "threads") == str(w["threads"]), "worker --threads does not follow workers.threads")


def check_ports(o):
    """Flag = containerPort = probe port = Service target. The native gRPC probe cannot do TLS: with tls.enabled
    the probes must be tcpSocket probes. The coordinator's startupProbe outlasts its startup."""
    c, api, headless, values = o.c, o.api, o.headless, o.values
    # The coordinator refuses --auth-tokens or --peer-cert without a separate --peer-listen port.
    peer_on = values["tls"]["enabled"] or values["auth"]["enabled"]
    for name, ctr, port, svc in (("coordinator", o.coord, c["port"], api), ("worker", o.worker, o.w["port"], headless)):
        need([p["containerPort"] for p in ctr["ports"] if p["name"] == "grpc"] == [port], f"{name}: containerPort != {port}")
        kind, other = ("tcpSocket", "grpc") if values["tls"]["enabled"] else ("grpc", "tcpSocket")
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            need(ctr.get(probe, {}).get(kind, {}).get("port") == port and other not in ctr[probe],
                 f"{name}: {probe} is not a {kind} probe on {port}")
        want = ["grpc"] + (["peer"] if svc is api and peer_on else []) + (["metrics"] if values["metrics"]["enabled"] else [])
        need([p["targetPort"] for p in svc["spec"]["ports"]] == want,
             f"{name} Service targets {[p['targetPort'] for p in svc['spec']['ports']]}, expected {want}")
    need(headless["spec"]["ports"][0]["port"] == o.w["port"], "the worker Service port differs from workers.port")
    need(api["spec"]["ports"][0]["port"] == c["service"]["port"], "the coordinator Service port differs from its value")
    # The coordinator may take --startup-timeout to reach its workers plus one assignment to map weights.
    sp = o.coord["startupProbe"]
    need(sp["periodSeconds"] * sp["failureThreshold"] >= parse_duration(c["startupTimeout"]) + ASSIGN_TIMEOUT_S,
         "the coordinator's startupProbe gives up before --startup-timeout plus the 10-minute assignment")


def check_flagfiles(o):
    """Flagfiles: in the ConfigMap, mounted, read last; the ConfigMap's check-model.sh and checksum."""
    data = o.config["data"]
    for args, program, key in ((o.cargs, "layerpipe-coordinator", "coordinator.flags"),
                               (o.wargs, "layerpipe-worker", "worker.flags")):
        need(args[-1] == f"--flagfile=/etc/layerpipe/config/{key}", f"{program}: the flagfile must come last")
        need(key in data, f"ConfigMap has no {key}")
        o.ctx.programs.check_flag_lines(data[key] or "", program, f"ConfigMap {key}")
    need([l for l in (data["coordinator.flags"] or "").splitlines() if l.strip()] == o.c["extraFlags"],
         "coordinator.flags does not hold coordinator.extraFlags")
    need(data.get("check-model.sh") == read(os.path.join(o.ctx.chart, "files", "check-model.sh")),
         "the ConfigMap's check-model.sh differs from files/check-model.sh")
    sums = {p["metadata"]["annotations"]["checksum/config"] for p in (o.deploy["spec"]["template"], o.sts["spec"]["template"])}
    need(len(sums) == 1, "the pods' checksum/config annotations differ")


def check_volumes(o):
    """The model read-only at one path, checked by the init containers; the config; the Secret."""
    model_values, mount_path = o.values["model"], o.values["model"]["mountPath"]
    for wl, pod in ((o.deploy, o.coord_pod), (o.sts, o.worker_pod)):
        vols = {v["name"]: v for v in pod["volumes"]}
        model = vols.get("model")
        need(model, f"{wl['kind']}: no model volume")
        if model_values["source"] == "pvc":
            need(model.get("persistentVolumeClaim") == {"claimName": model_values["pvc"]["claimName"], "readOnly": True},
                 f"{wl['kind']}: the model volume is not the read-only PVC {model_values['pvc']['claimName']}")
        else:
            need(model.get("hostPath", {}).get("path") == model_values["hostPath"]["path"],
                 f"{wl['kind']}: the model volume is not hostPath {model_values['hostPath']['path']}")
        inits = pod.get("initContainers", [])
        need(bool(inits) == model_values["validate"]["enabled"], f"{wl['kind']}: init container vs model.validate.enabled")
        for ctr in pod["containers"] + inits:
            where = f"{wl['kind']}/{ctr['name']}"
            mounts = {m["name"]: m for m in ctr.get("volumeMounts", [])}
            m = mounts.get("model")
            need(m and m["mountPath"] == mount_path and m.get("readOnly") is True,
                 f"{where}: the model is not mounted read-only at {mount_path}")
            need(m.get("subPath", "") == model_values["subPath"], f"{where}: subPath")
            need(mounts.get("config", {}).get("mountPath") == "/etc/layerpipe/config", f"{where}: config mount")
            need(("secret" in mounts) == o.secret_on, f"{where}: the secret mount does not follow the values")
            if o.secret_on:
                need(mounts["secret"]["mountPath"] == o.values["secret"]["mountPath"] and mounts["secret"]["readOnly"],
                     f"{where}: the secret is not mounted read-only at secret.mountPath")
        for init in inits:
            need(init["command"] == ["/bin/sh", "/etc/layerpipe/config/check-model.sh"] and init["args"][-1] == mount_path,
                 f"{wl['kind']}: the init container does not check {mount_path}")
            # The coordinator reads the JSON files (and the tokenizer); a worker reads the weights.
            want = ({"--no-weights"} | ({"--tokenizer"} if model_values["validate"]["requireTokenizer"] else set())
                    if wl is o.deploy else set())
            need(set(init["args"][:-1]) == want, f"{wl['kind']}: the init container checks with {init['args'][:-1]}, expected {want}")
        if o.secret_on:
            need(vols["secret"]["secret"]["secretName"] == o.secret_name(), f"{wl['kind']}: the secret volume names {vols['secret']}")
    check_job_state(o)


def check_job_state(o):
    """The coordinator's --state-dir is a writable mount of the claim the values name, else an emptyDir
    (the root filesystem is read-only); the workers keep no jobs."""
    jobs = o.c["jobs"]
    vols = {v["name"]: v for v in o.coord_pod["volumes"]}
    want = ({"persistentVolumeClaim": {"claimName": jobs["persistentVolumeClaim"]}} if jobs["persistentVolumeClaim"]
            else {"emptyDir": {}})
    got = {k: v for k, v in vols.get("state", {}).items() if k != "name"}
    need(got == want, f"the coordinator's state volume is {got}, expected {want}")
    mounts = {m["name"]: m for m in o.coord.get("volumeMounts", [])}
    m = mounts.get("state")
    need(m and m["mountPath"] == jobs["stateDir"] and not m.get("readOnly"),
         f"the state volume is not mounted writable at {jobs['stateDir']}: {m}")
    need("state" not in {v["name"] for v in o.worker_pod["volumes"]}, "a worker pod has a state volume")


def check_secret(o):
    if o.values["secret"]["create"]:
        data = {k: base64.b64decode(v).decode() for k, v in (o.one("Secret").get("data") or {}).items()}
        need(data == o.values["secret"]["data"], "the Secret's data differs from secret.data")
    else:
        need("Secret" not in o.by_kind, "a Secret is created although secret.create is false")


def check_scheduling(o):
    """GPUs only when asked, with the GPU image; resources, node placement, no service account token."""
    w, values, worker = o.w, o.values, o.worker
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
    app_version = str(yaml.safe_load(read(os.path.join(o.ctx.chart, "Chart.yaml")))["appVersion"])
    want_image = f"{image['repository']}:{image['tag'] or app_version}"
    need(worker["image"] == want_image, f"worker image {worker['image']!r}, expected {want_image!r}")
    need(o.worker_pod.get("runtimeClassName") == (gpu["runtimeClassName"] or None if gpu["enabled"] else None),
         "runtimeClassName does not follow workers.gpu")
    for pod, vals in ((o.coord_pod, o.c), (o.worker_pod, w)):
        for key in ("nodeSelector", "tolerations", "affinity"):
            need(pod.get(key) == (vals[key] or None), f"{key} does not follow the values")
        need(pod.get("automountServiceAccountToken") is False, "pods must not mount a service account token")


def check_pdbs(o):
    pdbs = o.by_kind.get("PodDisruptionBudget", [])
    need(len(pdbs) == int(o.w["pdb"]["enabled"]) + int(o.c["pdb"]["enabled"]), "PodDisruptionBudgets do not follow pdb.enabled")
    for pdb in pdbs:
        labels = o.coord_labels if pdb["metadata"]["labels"]["app.kubernetes.io/component"] == "coordinator" else o.worker_labels
        need(pdb["spec"]["selector"]["matchLabels"].items() <= labels.items(), f"PDB {pdb['metadata']['name']} selects nothing")


def check_helm_test_and_notes(o):
    """`helm test` calls the coordinator Service (with TLS and a token when it wants them); NOTES.txt."""
    values, c, api = o.values, o.c, o.api
    tls, auth = values["tls"], values["auth"]
    test_pod = o.one("Pod", "test")
    need(test_pod["metadata"]["annotations"].get("helm.sh/hook") == "test", "the test pod is not a helm test hook")
    targs = test_pod["spec"]["containers"][0]["command"] + test_pod["spec"]["containers"][0]["args"]
    o.ctx.programs.check_argv(targs, "helm test pod")
    api_addr = f"{api['metadata']['name']}.{NAMESPACE}.svc.{values['clusterDomain']}:{c['service']['port']}"
    need(flag_value(targs, "coordinator") == api_addr, f"the helm test pod calls {flag_value(targs, 'coordinator')}")
    need(f"port-forward service/{api['metadata']['name']} {c['service']['port']}:{c['service']['port']}" in o.notes,
         "NOTES.txt does not show the port-forward to the coordinator Service")
    need("NOT used" not in o.notes, "NOTES.txt still says the Secret is not used")
    need(("tcpSocket" in o.notes) == tls["enabled"], "NOTES.txt must say that with TLS the probes are tcpSocket probes")
    need((f":{values['metrics']['port']}/metrics" in o.notes) == values["metrics"]["enabled"],
         "NOTES.txt must show the metrics port")
    mount = values["secret"]["mountPath"]
    want_flags = {"tls-ca": f"{mount}/{tls['caKey']}" if tls["enabled"] else None,
                  "token-file": f"{mount}/{auth['testTokenKey']}" if auth["enabled"] else None}
    for flag, want in want_flags.items():
        need(flag_value(targs, flag) == want, f"the helm test pod's --{flag} is {flag_value(targs, flag)!r}, expected {want!r}")
    tmounts = {m["name"]: m["mountPath"] for m in test_pod["spec"]["containers"][0].get("volumeMounts", [])}
    if tls["enabled"] or auth["enabled"]:
        need(tmounts.get("secret") == mount, "the helm test pod does not mount the Secret")
        tvols = {v["name"]: v for v in test_pod["spec"].get("volumes", [])}
        need(tvols.get("secret", {}).get("secret", {}).get("secretName") == o.secret_name(),
             "the helm test pod's secret volume is not the chart's Secret")
