"""The Helm chart's own files: Chart.yaml and values.yaml, values.schema.json against good and broken values,
the .Values paths the templates name, `helm lint --strict`, and `helm template` of every scenario (the
rendered objects then go through chart_objects.check_objects)."""
import collections
import json
import os
import re

import yaml

import chart_objects
from util import NAMESPACE, RELEASE, Fail, merge_values, need, read

try:
    import jsonschema
except ImportError:  # reported as a failure by check_schema
    jsonschema = None

# What one scenario rendered to: merged values, [(template, object)], NOTES.txt, the release name.
Rendering = collections.namedtuple("Rendering", "values objects notes release")

# Values the schema must reject, each merged over values.yaml.
BROKEN_VALUES = {
    "workers.replicas two": {"workers": {"replicas": "two"}},
    "workers.replicas 0": {"workers": {"replicas": 0}},
    "workers.replicas 49 (more stages than layers)": {"workers": {"replicas": 49}},
    "precision fp16": {"precision": "fp16"},
    "quantize int3": {"quantize": "int3"},
    "quantizeHead int4": {"quantizeHead": "int4"},
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
    "jobs.stateDir relative": {"coordinator": {"jobs": {"stateDir": "state"}}},
    "typo in coordinator.jobs": {"coordinator": {"jobs": {"persistentVolume": "jobs"}}},
}

# Rendered besides the defaults and the ci/ files: values overrides, or a release name (a string).
VARIANTS = {
    "replicas 1": [{"workers": {"replicas": 1}}],
    "replicas 5, layerSplit": [{"workers": {"replicas": 5},
                                "coordinator": {"layerSplit": "0-9,10-19,20-29,30-39,40-47"}}],
    "existing secret, subPath, no validation": [{
        "secret": {"existingSecret": "layerpipe-tls"},
        "model": {"subPath": "gemma-4-12b-it", "validate": {"enabled": False, "requireTokenizer": True}},
        "fullnameOverride": "lp"}],
    "metrics off": [{"metrics": {"enabled": False, "serviceMonitor": {"enabled": True}}}],
    "tls only, created secret": [{
        "coordinator": {"peerPort": 7443},
        "tls": {"enabled": True, "certKey": "server.pem", "keyKey": "server-key.pem", "caKey": "cluster-ca.pem"},
        "secret": {"create": True, "data": {"server.pem": "c", "server-key.pem": "k", "cluster-ca.pem": "a"}},
        "metrics": {"port": 9091}}],
    "tokens without TLS, limit": [{"auth": {"enabled": True}, "limits": {"maxConcurrentPerClient": 4},
                                   "secret": {"create": True, "data": {"tokens": "t", "test-token": "t"}}}],
    "release name without the chart's": "prod",
    "jobs on a claim": [{"coordinator": {"jobs": {"stateDir": "/data/jobs", "persistentVolumeClaim": "layerpipe-jobs"}}}],
}


def values(ctx):
    return yaml.safe_load(read(os.path.join(ctx.chart, "values.yaml")))


def ci_files(ctx):
    """{file name: path} of the chart's ci/*-values.yaml examples."""
    ci = os.path.join(ctx.chart, "ci")
    return {f: os.path.join(ci, f) for f in sorted(os.listdir(ci)) if f.endswith(".yaml")}


def ci_values(ctx):
    return {name: yaml.safe_load(read(path)) for name, path in ci_files(ctx).items()}


def check_metadata(ctx):
    chart = yaml.safe_load(read(os.path.join(ctx.chart, "Chart.yaml")))
    need(chart.get("apiVersion") == "v2", "Chart.yaml: apiVersion must be v2")
    need(chart.get("name") == "layerpipe", "Chart.yaml: name must be the directory's, layerpipe")
    need(re.fullmatch(r"\d+\.\d+\.\d+(-[\w.]+)?", str(chart.get("version", ""))), "Chart.yaml: version is not SemVer")
    need(chart.get("appVersion"), "Chart.yaml: appVersion missing")
    need(isinstance(values(ctx), dict), "values.yaml is not a mapping")
    for name, v in ci_values(ctx).items():
        need(isinstance(v, dict), f"ci/{name} is not a mapping")
    need(os.path.isfile(os.path.join(ctx.chart, "templates", "NOTES.txt")), "templates/NOTES.txt missing")


def check_lint(ctx):
    """`helm lint --strict` with the default values and with each ci/ file."""
    findings = set()
    for name, overrides in [("values.yaml", [])] + [(f"ci/{n}", [p]) for n, p in ci_files(ctx).items()]:
        try:
            findings.update(ctx.helm.lint(overrides))
        except Fail as e:
            raise Fail(f"[{name}] {e}") from None
    return f"helm {ctx.helm.version()}: values.yaml and {len(ci_files(ctx))} ci values clean" + \
        (f" ({'; '.join(sorted(findings))})" if findings else "")


def check_schema(ctx):
    need(jsonschema is not None, "python3-jsonschema is not installed (scripts/install_deps.sh)")
    schema = json.loads(read(os.path.join(ctx.chart, "values.schema.json")))
    need(schema.get("$schema", "").startswith("http://json-schema.org/draft-07/"), "the schema must declare draft-07")
    jsonschema.Draft7Validator.check_schema(schema)
    validator = jsonschema.Draft7Validator(schema)

    def errors(v):
        return [f"{'.'.join(map(str, e.path)) or '(top)'}: {e.message}" for e in validator.iter_errors(v)]

    base = values(ctx)
    need(not errors(base), f"values.yaml is rejected: {errors(base)}")
    for name, override in ci_values(ctx).items():
        # Helm validates the values after coalescing the user's over the chart's.
        merged = merge_values(base, override)
        need(not errors(merged), f"ci/{name} is rejected: {errors(merged)}")
    for what, override in BROKEN_VALUES.items():
        need(errors(merge_values(base, override)), f"the schema accepts broken values: {what}")
    return f"values.yaml and {len(ci_values(ctx))} ci values accepted, {len(BROKEN_VALUES)} broken variants rejected"


def check_values_paths(ctx):
    """Every .Values path a template names exists in values.yaml (also through `$v := .Values.a.b`)."""
    vals = values(ctx)
    problems, count = [], 0
    for root, _, files in os.walk(os.path.join(ctx.chart, "templates")):
        for fname in sorted(files):
            rel = os.path.relpath(os.path.join(root, fname), ctx.chart)
            text = read(os.path.join(root, fname))
            aliases = {m.group(1): m.group(2)[1:].split(".")
                       for m in re.finditer(r"\$(\w+)\s*:?=\s*\.Values((?:\.\w+)+)\s*(?:}}|-}})", text)}
            paths = [m.group(1)[1:].split(".") for m in re.finditer(r"\.Values((?:\.\w+)+)", text)]
            for m in re.finditer(r"\$(\w+)((?:\.\w+)+)", text):
                if m.group(1) in aliases:
                    paths.append(aliases[m.group(1)] + m.group(2)[1:].split("."))
            for p in paths:
                count += 1
                node = vals
                for i, key in enumerate(p):
                    if not isinstance(node, dict) or key not in node:
                        problems.append(f"{rel}: .Values.{'.'.join(p)} ({'.'.join(p[:i + 1])} is not in values.yaml)")
                        break
                    node = node[key]
    need(not problems, "; ".join(sorted(set(problems))))
    return f"{count} references"


def scenarios(ctx):
    """{scenario: (release name, [values file path or overrides dict])}."""
    out = {"defaults": (RELEASE, [])}
    for name, path in ci_files(ctx).items():
        out[f"ci/{name}"] = (RELEASE, [path])
    for name, v in VARIANTS.items():
        out[name] = (v, []) if isinstance(v, str) else (RELEASE, v)
    return out


def check_render(ctx):
    """`helm template` of each scenario; the objects must hang together (chart_objects)."""
    notes = []
    for scenario, (release, overrides) in scenarios(ctx).items():
        try:
            objects, notes_txt = ctx.helm.template(release, NAMESPACE, overrides)
            merged = values(ctx)
            for o in overrides:
                merged = merge_values(merged, yaml.safe_load(read(o)) if isinstance(o, str) else o)
            rendering = Rendering(merged, objects, notes_txt, release)
            chart_objects.check_objects(ctx, rendering)
            ctx.rendered[scenario] = rendering
            notes.append(f"{scenario}: {len(objects)} objects")
        except Fail as e:
            raise Fail(f"[{scenario}] {e}") from None
    return "; ".join(notes)
