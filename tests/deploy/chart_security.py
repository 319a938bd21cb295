"""Cross-object checks of the rendered chart's metrics and security (chart_objects.Objects): --metrics-listen,
the `metrics` containerPort, the prometheus.io/* annotations and the Services' metrics port agree (all absent
when off), the ServiceMonitor follows its values and selects both Services; TLS, tokens, limits: exactly the
expected --tls-*/--peer-*/--auth-tokens/--max-concurrent-per-client flags, naming files under the mounted
Secret (present in secret.data when the chart creates it), the peer port in flag, containerPort and Service."""
from flags import flag_value
from util import need


def check_metrics(o):
    metrics = o.values["metrics"]
    mport = metrics["port"]
    for name, wl, ctr, args, svc in (("coordinator", o.deploy, o.coord, o.cargs, o.api),
                                     ("worker", o.sts, o.worker, o.wargs, o.headless)):
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
    monitors = o.by_kind.get("ServiceMonitor", [])
    need(len(monitors) == int(metrics["enabled"] and metrics["serviceMonitor"]["enabled"]),
         "the ServiceMonitor does not follow metrics.enabled and metrics.serviceMonitor.enabled")
    for sm in monitors:
        sel = sm["spec"]["selector"]["matchLabels"]
        for svc in (o.api, o.headless):
            need(sel.items() <= svc["metadata"]["labels"].items(), f"the ServiceMonitor does not select Service {svc['metadata']['name']}")
        need([e["port"] for e in sm["spec"]["endpoints"]] == ["metrics"] and sm["spec"]["endpoints"][0]["path"] == "/metrics",
             "the ServiceMonitor must scrape the metrics port at /metrics")
        for k, v in metrics["serviceMonitor"]["labels"].items():
            need(sm["metadata"]["labels"].get(k) == v, f"the ServiceMonitor lacks label {k}={v}")


def check_tls_and_tokens(o):
    values = o.values
    tls, auth = values["tls"], values["auth"]
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
        need({p["name"]: p["containerPort"] for p in o.coord["ports"]}.get("peer") == peer_port,
             "the coordinator's peer containerPort differs from --peer-listen")
        peer = [p for p in o.api["spec"]["ports"] if p["name"] == "peer"]
        need(peer and peer[0]["port"] == peer_port and peer[0]["targetPort"] == "peer",
             "the coordinator Service does not expose the peer port the coordinator advertises")
    if tls["enabled"]:
        need(o.secret_on, "tls.enabled renders without a Secret to read the certificates from")
        cert, key, ca = file_of(tls["certKey"]), file_of(tls["keyKey"]), file_of(tls["caKey"])
        coord_want.update({"tls-cert": cert, "tls-key": key, "peer-cert": cert, "peer-key": key, "peer-ca": ca})
        worker_want.update({"tls-cert": cert, "tls-key": key, "tls-ca": ca})
        files += [tls["certKey"], tls["keyKey"], tls["caKey"]]
    if auth["enabled"]:
        need(o.secret_on, "auth.enabled renders without a Secret to read the tokens from")
        coord_want["auth-tokens"] = file_of(auth["tokensKey"])
        files.append(auth["tokensKey"])
    if values["limits"]["maxConcurrentPerClient"]:
        coord_want["max-concurrent-per-client"] = str(values["limits"]["maxConcurrentPerClient"])
    for name, args, want in (("coordinator", o.cargs, coord_want), ("worker", o.wargs, worker_want)):
        for flag, value in want.items():
            need(flag_value(args, flag) == value, f"{name} --{flag} is {flag_value(args, flag)!r}, expected {value!r}")
    # The files the flags name are in the Secret the chart creates (an existing one is the user's).
    if values["secret"]["create"]:
        for f in files:
            need(f in values["secret"]["data"], f"secret.data has no {f}, which a flag reads")
