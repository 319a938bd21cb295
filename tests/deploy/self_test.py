"""--self-test: copies the deployment files (and this checker), injects one error at a time and asserts the
checker then fails, naming the problem. Template errors are caught by the real helm (template or
lint --strict) or by the checks on what it rendered."""
import os
import shutil
import subprocess
import sys
import tempfile

from util import read

# (what, file, text, replacement, what the checker's output must then say)
MUTATIONS = [
    ("a YAML indentation error in a template", "helm/layerpipe/templates/worker-service.yaml",
     "  clusterIP: None\n", "  clusterIP: None\n   publishNotReadyAddresses: false\n",
     "YAML parse error on layerpipe/templates/worker-service.yaml"),
    ("a duplicate key in a template", "helm/layerpipe/templates/coordinator-service.yaml",
     "  type: {{", "  selector: {}\n  type: {{", "duplicate key"),
    ("a .Values path missing from values.yaml", "helm/layerpipe/templates/worker-statefulset.yaml",
     "$w.terminationGracePeriodSeconds", "$w.terminationGracePeriod", "terminationGracePeriod"),
    ("an API version Kubernetes removed (only helm lint --strict objects)", "helm/layerpipe/templates/worker-pdb.yaml",
     "apiVersion: policy/v1\n", "apiVersion: policy/v1beta1\n", "PodDisruptionBudget is deprecated"),
    ("a misspelt function", "helm/layerpipe/templates/coordinator-pdb.yaml", "| nindent 4", "| nindnet 4",
     "not defined"),
    ("an unclosed if", "helm/layerpipe/templates/secret.yaml", "{{- end }}\n{{- if .Values.secret.create }}",
     "{{- if .Values.secret.create }}", "unexpected EOF"),
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


def self_test(src, bin_dir, work, helm):
    """Each mutation breaks one file of a copy of the tree; the checker must then fail, naming the problem."""
    if not (os.path.isfile(helm) and os.access(helm, os.X_OK)):
        print(f"FAIL no helm binary at {helm!r}: scripts/fetch_helm.sh installs it", flush=True)
        return 1
    failures = []
    for what, rel, old, new, expect in MUTATIONS:
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
                "--work", os.path.join(tree, "work"), "--helm", helm, "--no-smoke"]
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
    print(f"{len(MUTATIONS) - len(failures)} passed, {len(failures)} failed", flush=True)
    return 1 if failures else 0


