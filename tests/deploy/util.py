"""What every part of the deploy checker shares: the failure type, file reading, durations, values merging,
free ports, and the tree under check (Context)."""
import os
import re
import socket

BINARIES = ("layerpipe", "layerpipe-coordinator", "layerpipe-worker")
RELEASE, NAMESPACE = "layerpipe", "inference"
# A 48-layer checkpoint with the 12B's layer pattern (so every split of the real model applies) and tiny shapes.
TINY_CHECKPOINT = ["--layers", "48", "--hidden", "64", "--intermediate", "128", "--vocab", "512", "--heads", "2",
                   "--head-dim", "32", "--kv-heads", "1", "--global-head-dim", "64", "--global-kv-heads", "1",
                   "--window", "16"]


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


def merge_values(base, override):
    """Helm's coalescing of user values over the chart's: maps merge, everything else is replaced."""
    if not isinstance(base, dict) or not isinstance(override, dict):
        return override
    out = dict(base)
    for k, v in override.items():
        out[k] = merge_values(base[k], v) if k in base and isinstance(v, dict) else v
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Context:
    """The tree under check, the built binaries (None when absent) and a scratch directory; check_deploy adds
    helm (helm_render.Helm) and programs (flags.Programs)."""

    def __init__(self, src, bin_dir, work, smoke):
        self.src = os.path.abspath(src)
        self.bin = os.path.abspath(bin_dir) if bin_dir else None
        if self.bin and not all(os.access(os.path.join(self.bin, b), os.X_OK) for b in BINARIES):
            self.bin = None
        self.work = work
        self.helm = self.programs = None
        self.smoke = smoke
        self.chart = os.path.join(self.src, "helm", "layerpipe")
        self.rendered = {}  # scenario -> chart_checks.Rendering, for the smoke run

    def path(self, *parts):
        return os.path.join(self.src, *parts)
