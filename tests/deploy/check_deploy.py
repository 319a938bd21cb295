#!/usr/bin/env python3
"""Checks the deployment files: the Helm chart, the compose file, the systemd units, the images and the docs.

The chart is linted and rendered by the real Helm (--helm, installed by scripts/fetch_helm.sh); no Docker
engine or cluster is needed. What is checked, and where:
- chart_checks: Chart.yaml and values.yaml parse; `helm lint --strict` passes with the default values and
  with each ci/*-values.yaml; values.schema.json is a valid draft-07 schema that accepts values.yaml and
  every ci/*-values.yaml and rejects broken values; every `.Values.x.y` path a template names (directly or
  through a `$v := .Values...` variable) exists in values.yaml; `helm template` renders the default values,
  each ci/*-values.yaml and a few variants (extra values files, another release name), and its output
  parses as YAML with duplicate keys rejected (helm_render).
- chart_objects, chart_security: the rendered objects hang together: selectors match pod labels, the
  StatefulSet's headless Service, the coordinator's --workers list is exactly the StatefulSet's stable DNS
  names for workers.replicas, ports agree between flags, containers, probes (native gRPC, or tcpSocket with
  tls.enabled) and Services, the model volume is mounted read-only at the same path everywhere, GPU
  requests appear only with workers.gpu.enabled, the Secret is mounted when enabled, every flag exists
  (flags); metrics flags, ports, annotations and the ServiceMonitor agree; TLS, tokens and limits give
  exactly the expected flags, naming files under the mounted Secret; the `helm test` pod and NOTES.txt.
- files_checks: the compose file, the systemd units and the Dockerfiles parse (deploy_files), name the three
  binaries and only flags they define, and agree on ports and variables; deploy/runtime-packages.sh
  resolves the binaries' libraries to packages; docs/deploy.md's sizing tables equal deploy/sizing.py's.
- model_script_check: check-model.sh accepts complete checkpoints and rejects incomplete ones.
- smoke (with built binaries): the command lines helm rendered, the compose file's and the systemd units'
  start a real loopback pipeline, with health, metrics, TLS and tokens checked against it.

--self-test (self_test) copies the files, injects one error at a time and asserts the checker fails on each.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chart_checks  # noqa: E402
import files_checks  # noqa: E402
import helm_render  # noqa: E402
import model_script_check  # noqa: E402
import self_test  # noqa: E402
import smoke  # noqa: E402
from flags import Programs  # noqa: E402
from util import Context, Fail  # noqa: E402


class Results:
    def __init__(self):
        self.failed, self.passed = [], 0

    def run(self, name, fn, *args):
        t0 = time.monotonic()
        try:
            note = fn(*args)
            self.passed += 1
            print(f"PASS {name} ({time.monotonic() - t0:.1f}s){': ' + note if note else ''}", flush=True)
        except (Fail, yaml.YAMLError, OSError, subprocess.SubprocessError) as e:
            self.fail(name, f"{type(e).__name__}: {e}")
        except Exception:  # noqa: BLE001 - a rendered object without an expected field, say: report, go on
            self.fail(name, traceback.format_exc())

    def fail(self, name, why):
        self.failed.append(name)
        print(f"FAIL {name}: {why}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."),
                    help="repository root")
    ap.add_argument("--bin", help="directory of the built binaries (default: SRC/build/bin when present)")
    ap.add_argument("--work", help="scratch directory (default: a temporary one)")
    ap.add_argument("--helm", help="the helm binary (default: SRC/third_party/npm/helm/helm, from scripts/fetch_helm.sh)")
    ap.add_argument("--no-smoke", action="store_true", help="do not start the binaries")
    ap.add_argument("--self-test", action="store_true", help="check that injected errors are caught")
    args = ap.parse_args()
    src = os.path.abspath(args.src)
    bin_dir = args.bin or os.path.join(src, "build", "bin")
    helm = os.path.abspath(args.helm or os.path.join(src, "third_party", "npm", "helm", "helm"))
    work = os.path.abspath(args.work or tempfile.mkdtemp(prefix="layerpipe-deploy-"))
    os.makedirs(work, exist_ok=True)
    if args.self_test:
        return self_test.self_test(src, bin_dir if os.path.isdir(bin_dir) else None, work, helm)
    ctx = Context(src, bin_dir, work, smoke=not args.no_smoke)
    ctx.helm = helm_render.Helm(helm, ctx.chart, work)
    ctx.programs = Programs(ctx)
    print(f"binaries: {ctx.bin or 'none (flags from the source)'}", flush=True)
    print(f"helm: {ctx.helm.missing() or helm}", flush=True)
    results = Results()
    results.run("chart metadata", chart_checks.check_metadata, ctx)
    results.run("helm lint --strict", chart_checks.check_lint, ctx)
    results.run("values schema", chart_checks.check_schema, ctx)
    results.run("values paths in templates", chart_checks.check_values_paths, ctx)
    results.run("helm template: the chart renders and hangs together", chart_checks.check_render, ctx)
    results.run("check-model.sh", model_script_check.check_model_script, ctx)
    results.run("docker-compose.yml", files_checks.check_compose, ctx)
    results.run("systemd units", files_checks.check_systemd, ctx)
    results.run("Dockerfiles", files_checks.check_dockerfiles, ctx)
    results.run("sizing tables", files_checks.check_sizing, ctx)
    if all(s in ctx.rendered for s in ("defaults", "ci/gpu-values.yaml", "ci/tls-values.yaml")):
        results.run("smoke: the deployments' command lines run a pipeline", smoke.check_smoke, ctx)
    else:
        results.fail("smoke", "the chart did not render")
    print(f"{results.passed} passed, {len(results.failed)} failed", flush=True)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if results.failed else 0


if __name__ == "__main__":
    sys.exit(main())
