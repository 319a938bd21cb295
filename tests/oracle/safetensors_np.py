"""Minimal safetensors reader for the oracle: everything comes back as float64.

Format: 8-byte little-endian header length n, n bytes of JSON header, then raw tensor bytes.
Each header entry gives dtype, shape and data_offsets [begin, end) relative to the byte after
the header. Deliberately independent of any safetensors package so that the reference does not
share a parser with the code under test.
"""

import json
import os
import struct

import numpy as np

# BF16 is the top half of an IEEE float32, so it is read as uint16 and widened by a shift.
_RAW_DTYPES = {
    "BF16": np.dtype("<u2"),
    "F16": np.dtype("<f2"),
    "F32": np.dtype("<f4"),
    "F64": np.dtype("<f8"),
    "I32": np.dtype("<i4"),     # a quantized checkpoint's packed words and shapes (packed_np.py)
    "I64": np.dtype("<i8"),
}


def bf16_bits_to_float32(bits):
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def read_header(path):
    """Returns (header dict without __metadata__, byte offset where tensor data starts)."""
    with open(path, "rb") as f:
        prefix = f.read(8)
        if len(prefix) != 8:
            raise ValueError(f"{path}: too short for a safetensors header")
        (n,) = struct.unpack("<Q", prefix)
        if n > os.path.getsize(path) - 8:
            raise ValueError(f"{path}: header length {n} exceeds the file")
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header, 8 + n


def read_safetensors(path, names=None):
    """Returns {name: float64 ndarray} for every tensor in the file (or only those in `names`)."""
    header, data_start = read_header(path)
    data = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for name, entry in header.items():
        if names is not None and name not in names:
            continue
        dtype = entry["dtype"]
        if dtype not in _RAW_DTYPES:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {dtype}")
        raw_dtype = _RAW_DTYPES[dtype]
        shape = tuple(entry["shape"])
        begin, end = entry["data_offsets"]
        count = int(np.prod(shape, dtype=np.int64))
        if end - begin != count * raw_dtype.itemsize:
            raise ValueError(f"{path}: tensor {name}: {end - begin} bytes for shape {shape} {dtype}")
        if data_start + end > data.size:
            raise ValueError(f"{path}: tensor {name} runs past the end of the file")
        raw = data[data_start + begin:data_start + end].view(raw_dtype)
        values = bf16_bits_to_float32(raw) if dtype == "BF16" else raw
        out[name] = np.array(values, dtype=np.float64).reshape(shape)
    return out


def read_checkpoint_tensors(model_dir):
    """Reads model.safetensors, or every shard named by model.safetensors.index.json."""
    single = os.path.join(model_dir, "model.safetensors")
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(single):
        return read_safetensors(single)
    if not os.path.exists(index):
        raise FileNotFoundError(f"{model_dir}: neither model.safetensors nor model.safetensors.index.json")
    with open(index) as f:
        weight_map = json.load(f)["weight_map"]
    by_file = {}
    for name, shard in weight_map.items():
        by_file.setdefault(shard, set()).add(name)
    tensors = {}
    for shard, names in sorted(by_file.items()):
        found = read_safetensors(os.path.join(model_dir, shard), names)
        missing = names - found.keys()
        if missing:
            raise ValueError(f"{shard}: index lists tensors the shard lacks: {sorted(missing)[:5]}")
        tensors.update(found)
    return tensors
