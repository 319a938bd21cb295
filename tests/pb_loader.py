"""The layerpipe.v1 message classes for the Python tests and benchmarks, generated from
proto/layerpipe.proto with protoc at import time (no generated code is committed)."""

import importlib
import os
import shutil
import subprocess
import sys
import tempfile


def load_layerpipe_pb2(repo_root):
    """Compiles proto/layerpipe.proto under repo_root and returns the imported layerpipe_pb2 module."""
    out = tempfile.mkdtemp(prefix="layerpipe_pb_")
    try:
        subprocess.run(["protoc", f"--proto_path={repo_root}", f"--python_out={out}",
                        os.path.join(repo_root, "proto", "layerpipe.proto")], check=True)
        sys.path.insert(0, out)
        try:
            return importlib.import_module("proto.layerpipe_pb2")
        finally:
            sys.path.remove(out)
    finally:
        shutil.rmtree(out, ignore_errors=True)
