"""Checkpoints quantized ahead of time in the compressed-tensors pack-quantized layout (Google's QAT
w4a16 release), dequantized for the oracle: written from the layout as it ships, sharing nothing with
the engine's reader (engine/model/compressed_tensors.cc).

A quantized Linear `<name>.weight` is stored as `<name>.weight_packed` (int32 [out, in/8]: value 8j+i of
a row in bits 4i..4i+3 of word j, as q + 8), `<name>.weight_scale` ([out, in/group_size]) and
`<name>.weight_shape` ([out, in]); its weight is q · scale of the value's group.
"""

import numpy as np

SUFFIXES = (".weight_packed", ".weight_scale", ".weight_shape")


def scheme(raw_config):
    """The group size of a quantization_config the oracle understands, or None without one."""
    q = raw_config.get("quantization_config")
    if q is None:
        return None
    if q.get("quant_method") != "compressed-tensors" or q.get("format", "pack-quantized") != "pack-quantized":
        raise ValueError(f"oracle: quantization_config {q.get('quant_method')}/{q.get('format')} is not w4a16")
    sizes = set()
    for name, group in q["config_groups"].items():
        w = group["weights"]
        if (w["num_bits"], w.get("type", "int"), w["symmetric"], w["strategy"]) != (4, "int", True, "group"):
            raise ValueError(f"oracle: config group {name} is not symmetric int4 in groups: {w}")
        sizes.add(int(w["group_size"]))
    if len(sizes) != 1:
        raise ValueError(f"oracle: config groups disagree on group_size: {sorted(sizes)}")
    return sizes.pop()


def dequantize(packed, scale, shape, group_size):
    """q · s as float64 [out, in] from the stored tensors (read as float64 by safetensors_np)."""
    rows, cols = (int(v) for v in shape)
    words = packed.astype(np.int64) & 0xFFFFFFFF          # int32 bit patterns, as unsigned
    if words.shape != (rows, cols // 8):
        raise ValueError(f"oracle: packed words {words.shape} for a [{rows}, {cols}] weight")
    nibbles = np.stack([(words >> (4 * i)) & 0xF for i in range(8)], axis=-1)   # [rows, cols/8, 8]
    q = nibbles.reshape(rows, cols).astype(np.float64) - 8.0
    s = np.repeat(scale.astype(np.float64), group_size, axis=1)
    if s.shape != (rows, cols):
        raise ValueError(f"oracle: scales {scale.shape} do not cover [{rows}, {cols}] in groups of {group_size}")
    return q * s


def unpacked(tensors, group_size):
    """The tensors with every packed Linear replaced by its dequantized `<name>.weight`."""
    out = {n: t for n, t in tensors.items() if not n.endswith(SUFFIXES)}
    for name, packed in tensors.items():
        if not name.endswith(".weight_packed"):
            continue
        base = name[:-len("_packed")]
        if base in tensors:
            raise ValueError(f"oracle: {base} is stored both packed and unpacked")
        out[base] = dequantize(packed, tensors[base + "_scale"], tensors[base + "_shape"], group_size)
    return out
