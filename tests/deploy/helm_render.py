"""The real Helm (scripts/fetch_helm.sh) over the chart: `helm lint --strict` and `helm template`, whose
multi-document output is read as Kubernetes' go-yaml would read it (a duplicate key is an error)."""
import json
import os
import re
import subprocess

import yaml

from util import Fail, need


class _NoDuplicatesLoader(yaml.SafeLoader):
    """Reads YAML as Kubernetes' go-yaml does: duplicate keys are errors, plain y/n are booleans."""


def _mapping_without_duplicates(loader, node, deep=False):
    keys = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in keys:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        keys.add(key)
    return loader.construct_mapping(node, deep=deep)


_GO_YAML_SHORT_BOOLS = {"y": True, "Y": True, "n": False, "N": False}
_NoDuplicatesLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)
_NoDuplicatesLoader.add_implicit_resolver("tag:yaml.org,2002:go-short-bool", re.compile(r"^[yYnN]$"), list("yYnN"))
_NoDuplicatesLoader.add_constructor("tag:yaml.org,2002:go-short-bool",
                                    lambda loader, node: _GO_YAML_SHORT_BOOLS[loader.construct_scalar(node)])


def parse_manifests(text):
    """[(template path, object)] of `helm template` output: documents after `---`, each under `# Source: path`."""
    out = []
    for chunk in re.split(r"^---[ \t]*$", text, flags=re.M):
        source = re.search(r"^# Source: (\S+)", chunk, re.M)
        where = source.group(1) if source else "helm output"
        try:
            docs = [d for d in yaml.load_all(chunk, Loader=_NoDuplicatesLoader) if d is not None]
        except yaml.YAMLError as e:
            raise Fail(f"{where} is not valid YAML: {e}") from None
        for d in docs:
            need(isinstance(d, dict), f"{where}: a document is not a mapping")
            out.append((where, d))
    return out


def lint_findings(text):
    """The `[INFO] ...`, `[WARNING] ...`, `[ERROR] ...` lines of helm lint's output."""
    return re.findall(r"^\s*(\[(?:INFO|WARNING|ERROR)\] .*?)\s*$", text, re.M)


class Helm:
    """One helm binary, run with its config, cache and data under the scratch directory and no cluster."""

    def __init__(self, exe, chart, work):
        self.exe, self.chart = exe, chart
        self.work = os.path.join(work, "helm")
        os.makedirs(self.work, exist_ok=True)
        home = os.path.join(self.work, "home")
        self.env = dict(os.environ, HELM_CONFIG_HOME=os.path.join(home, "config"),
                        HELM_CACHE_HOME=os.path.join(home, "cache"), HELM_DATA_HOME=os.path.join(home, "data"),
                        KUBECONFIG=os.path.join(home, "no-kubeconfig"), NO_COLOR="1")
        self._files = 0

    def missing(self):
        """Why helm cannot run, or None."""
        if self.exe and os.path.isfile(self.exe) and os.access(self.exe, os.X_OK):
            return None
        return f"no helm binary at {self.exe!r}: scripts/fetch_helm.sh installs it (scripts/install_deps.sh runs it)"

    def _run(self, what, *args):
        need(not self.missing(), self.missing())
        p = subprocess.run([self.exe, *args], capture_output=True, text=True, timeout=120, env=self.env)
        # lint prints its findings on stdout and only its verdict on stderr; template's error is on stderr.
        need(p.returncode == 0, f"helm {what} failed: {'; '.join(lint_findings(p.stdout) + [p.stderr.strip()])[-3000:]}")
        return p.stdout

    def version(self):
        return self._run("version", "version", "--template", "{{ .Version }}").strip()

    def values_files(self, overrides):
        """`--values` arguments: a path as it is, a dict written to a file of its own."""
        args = []
        for o in overrides:
            if isinstance(o, dict):
                self._files += 1
                path = os.path.join(self.work, f"values-{self._files}.yaml")
                with open(path, "w", encoding="utf-8") as f:
                    yaml.safe_dump(o, f)
                o = path
            args += ["--values", o]
        return args

    def lint(self, overrides=()):
        """`helm lint --strict` (warnings fail too); returns the findings it printed (INFO lines)."""
        return lint_findings(self._run("lint --strict", "lint", "--strict", self.chart, *self.values_files(overrides)))

    def template(self, release, namespace, overrides=()):
        """(objects, NOTES.txt): `helm template` parsed, and the notes `helm install --dry-run=client` prints
        (helm template does not render NOTES.txt)."""
        args = [release, self.chart, "--namespace", namespace, *self.values_files(overrides)]
        objects = parse_manifests(self._run("template", "template", *args))
        release_doc = json.loads(self._run("install --dry-run=client", "install", *args, "--dry-run=client",
                                           "--output", "json"))
        return objects, release_doc["info"].get("notes", "")
