"""The message classes for the Python tests and benchmarks, generated with protoc at import time (no
generated code is committed): layerpipe.v1 (proto/layerpipe.proto, the client API) and
layerpipe.internal.v1 (proto/internal.proto, the worker and step planes)."""

import functools
import importlib
import os
import shutil
import subprocess
import sys
import tempfile


@functools.lru_cache(maxsize=None)
def _compile(repo_root):
    """Compiles both .proto files and imports them: (layerpipe_pb2, internal_pb2)."""
    out = tempfile.mkdtemp(prefix="layerpipe_pb_")
    try:
        subprocess.run(["protoc", f"--proto_path={repo_root}", f"--python_out={out}",
                        os.path.join(repo_root, "proto", "layerpipe.proto"),
                        os.path.join(repo_root, "proto", "internal.proto")], check=True)
        sys.path.insert(0, out)
        try:
            return importlib.import_module("proto.layerpipe_pb2"), importlib.import_module("proto.internal_pb2")
        finally:
            sys.path.remove(out)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def load_layerpipe_pb2(repo_root):
    """The client API's messages (package layerpipe.v1)."""
    return _compile(repo_root)[0]


def load_internal_pb2(repo_root):
    """The worker and step planes' messages (package layerpipe.internal.v1)."""
    return _compile(repo_root)[1]
