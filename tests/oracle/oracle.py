#!/usr/bin/python3
"""Float64 reference ("oracle") for the Gemma 4 text forward pass.

Written from /work/shared/docs/MODEL.md §1-§2 and nothing else; the step comments quote it.
Everything runs in float64 so that the only error left is the engine's.

    oracle.py --model DIR --ids 2,5,9 --out logits.npy
"""

import argparse
import dataclasses
import json
import math
import os
import sys

import numpy as np

sys.dont_write_bytecode = True   # keep the source tree free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_np import read_checkpoint_tensors  # noqa: E402

SLIDING = "sliding_attention"
FULL = "full_attention"


# ----------------------------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class AttentionKind:
    """Geometry and position handling of one layer type (sliding or full)."""
    head_dim: int
    kv_heads: int
    v_from_raw_key: bool    # k_eq_v: no v_proj, v = rms_per_head(kraw)
    rope_theta: float
    rotated_pairs: int      # pairs (j, j + head_dim/2) with j < rotated_pairs rotate; others have inv_freq 0
    window: int | None      # sliding layers: q - k < window; None: causal only


@dataclasses.dataclass(frozen=True)
class TextConfig:
    hidden: int
    intermediate: int
    vocab: int
    heads: int
    layer_types: tuple
    kinds: dict             # layer type name -> AttentionKind
    rms_eps: float
    softcap: float | None


@dataclasses.dataclass
class Checkpoint:
    config: TextConfig
    weights: dict           # tensor name without the model prefix -> float64 ndarray


def text_config_of(raw):
    """The nested `text_config` of a gemma4_unified config, or the flat text config itself."""
    if "text_config" in raw:
        return raw["text_config"]
    return raw


def _rotated_pairs(rope, head_dim, layer_type):
    rope_type = rope.get("rope_type", "default")
    factor = float(rope.get("partial_rotary_factor", 1.0))
    if rope_type == "default":
        if factor != 1.0:
            raise ValueError(f"{layer_type}: default rope with partial_rotary_factor {factor} is not in MODEL.md")
        return head_dim // 2
    if rope_type == "proportional":
        # MODEL.md: n = int(0.25 * 512 / 2) = 64.
        return int(factor * head_dim / 2)
    raise ValueError(f"{layer_type}: unsupported rope_type {rope_type!r}")


def _rope_settings(tc):
    """{layer type: {"rope_type", "rope_theta", "partial_rotary_factor"}} from either config style."""
    params = tc.get("rope_parameters")
    if isinstance(params, dict) and (SLIDING in params or FULL in params):
        return {t: params[t] for t in (SLIDING, FULL) if t in params}
    # Older Gemma-3-style keys: rope_theta for full layers, rope_local_base_freq for sliding ones.
    return {
        SLIDING: {"rope_type": "default", "rope_theta": tc.get("rope_local_base_freq", 10000.0)},
        FULL: {"rope_type": "proportional", "rope_theta": tc.get("rope_theta", 1000000.0),
               "partial_rotary_factor": tc.get("partial_rotary_factor", 1.0)},
    }


def _layer_types(tc):
    if "layer_types" in tc:
        return tuple(tc["layer_types"])
    period = tc.get("sliding_window_pattern")
    if period is None:
        raise ValueError("config has neither layer_types nor sliding_window_pattern")
    return tuple(FULL if i % period == period - 1 else SLIDING for i in range(tc["num_hidden_layers"]))


def parse_config(raw):
    tc = text_config_of(raw)
    for key, inert in (("num_kv_shared_layers", 0), ("enable_moe_block", False),
                       ("hidden_size_per_layer_input", 0)):
        if tc.get(key, inert) not in (inert, None):
            raise ValueError(f"{key}={tc[key]} is not supported by the oracle (MODEL.md requires {inert})")
    layer_types = _layer_types(tc)
    if len(layer_types) != tc["num_hidden_layers"]:
        raise ValueError(f"layer_types has {len(layer_types)} entries, num_hidden_layers is {tc['num_hidden_layers']}")
    unknown = set(layer_types) - {SLIDING, FULL}
    if unknown:
        raise ValueError(f"unknown layer types {sorted(unknown)}")

    rope = _rope_settings(tc)
    k_eq_v = bool(tc.get("attention_k_eq_v", False))
    head_dim = tc["head_dim"]
    global_head_dim = tc.get("global_head_dim") or head_dim
    kv_heads = tc["num_key_value_heads"]
    global_kv_heads = tc.get("num_global_key_value_heads") or kv_heads
    kinds = {
        SLIDING: AttentionKind(
            head_dim=head_dim, kv_heads=kv_heads, v_from_raw_key=False,
            rope_theta=float(rope[SLIDING]["rope_theta"]),
            rotated_pairs=_rotated_pairs(rope[SLIDING], head_dim, SLIDING),
            window=int(tc["sliding_window"])),
        FULL: AttentionKind(
            head_dim=global_head_dim, kv_heads=global_kv_heads, v_from_raw_key=k_eq_v,
            rope_theta=float(rope[FULL]["rope_theta"]),
            rotated_pairs=_rotated_pairs(rope[FULL], global_head_dim, FULL),
            window=None),
    }
    heads = tc["num_attention_heads"]
    for t, kind in kinds.items():
        if heads % kind.kv_heads:
            raise ValueError(f"{t}: {heads} heads do not split over {kind.kv_heads} kv heads")
        if kind.head_dim % 2:
            raise ValueError(f"{t}: odd head_dim {kind.head_dim}")
    softcap = tc.get("final_logit_softcapping")
    return TextConfig(
        hidden=tc["hidden_size"], intermediate=tc["intermediate_size"], vocab=tc["vocab_size"],
        heads=heads, layer_types=layer_types, kinds=kinds,
        rms_eps=float(tc.get("rms_norm_eps", 1e-6)),
        softcap=None if softcap is None else float(softcap))


def expected_shapes(cfg):
    """{name: shape} of every decoder tensor the config implies (MODEL.md §1, tensor names)."""
    H, I = cfg.hidden, cfg.intermediate
    shapes = {"embed_tokens.weight": (cfg.vocab, H), "norm.weight": (H,)}
    for i, t in enumerate(cfg.layer_types):
        kind = cfg.kinds[t]
        p = f"layers.{i}."
        for norm in ("input_layernorm", "post_attention_layernorm",
                     "pre_feedforward_layernorm", "post_feedforward_layernorm"):
            shapes[p + norm + ".weight"] = (H,)
        shapes[p + "layer_scalar"] = (1,)
        shapes[p + "mlp.gate_proj.weight"] = (I, H)
        shapes[p + "mlp.up_proj.weight"] = (I, H)
        shapes[p + "mlp.down_proj.weight"] = (H, I)
        shapes[p + "self_attn.q_proj.weight"] = (cfg.heads * kind.head_dim, H)
        shapes[p + "self_attn.k_proj.weight"] = (kind.kv_heads * kind.head_dim, H)
        if not kind.v_from_raw_key:
            shapes[p + "self_attn.v_proj.weight"] = (kind.kv_heads * kind.head_dim, H)
        shapes[p + "self_attn.o_proj.weight"] = (H, cfg.heads * kind.head_dim)
        shapes[p + "self_attn.q_norm.weight"] = (kind.head_dim,)
        shapes[p + "self_attn.k_norm.weight"] = (kind.head_dim,)
    return shapes


def strip_prefix(tensors):
    """Drops `model.language_model.` (or `model.` when no tensor carries the longer prefix)."""
    for prefix in ("model.language_model.", "model."):
        if any(name.startswith(prefix) for name in tensors):
            return {name[len(prefix):]: t for name, t in tensors.items() if name.startswith(prefix)}
    raise ValueError("no tensor starts with model.language_model. or model.")


def check_weights(cfg, weights):
    for name, shape in expected_shapes(cfg).items():
        if name not in weights:
            raise ValueError(f"checkpoint lacks {name}")
        if weights[name].shape != shape:
            raise ValueError(f"{name}: shape {weights[name].shape}, config implies {shape}")
    for i, t in enumerate(cfg.layer_types):
        name = f"layers.{i}.self_attn.v_proj.weight"
        if cfg.kinds[t].v_from_raw_key and name in weights:
            raise ValueError(f"{name} present although attention_k_eq_v makes full layers take v from k_proj")


def load_checkpoint(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = parse_config(json.load(f))
    weights = strip_prefix(read_checkpoint_tensors(model_dir))
    check_weights(cfg, weights)
    return Checkpoint(cfg, weights)


# ----------------------------------------------------------------------------------------------
# Forward pass (MODEL.md §2)
# ----------------------------------------------------------------------------------------------

def exact(x):
    """Default activation rounding: none (float64 throughout)."""
    return x


def bf16_round(x):
    """Round-to-nearest-even to bfloat16 (via float32), returned as float64."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    half, one = np.uint64(16), np.uint64(1)
    bits = ((bits + np.uint64(0x7FFF) + ((bits >> half) & one)) >> half) << half
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


def linear(x, w):
    """Weights are stored [out, in]: y = x · wᵀ."""
    return x @ w.T


def rms(x, w=None, eps=1e-6):
    """rms(x, w) = x / sqrt(mean(x²) + eps) · w over the last axis; w as stored, not 1 + w."""
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y if w is None else y * w


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def inverse_frequencies(kind):
    """inv_freq[i] = theta^(-2i/head_dim) for i < rotated_pairs, 0 for the rest (cos 1, sin 0)."""
    i = np.arange(kind.head_dim // 2)
    inv_freq = kind.rope_theta ** (-2.0 * i / kind.head_dim)
    inv_freq[kind.rotated_pairs:] = 0.0
    return inv_freq


def apply_rotary(x, positions, kind):
    """Rotate-half layout: dim j pairs with j + head_dim/2. x: [tokens, heads, head_dim]."""
    half = kind.head_dim // 2
    angle = positions[:, None] * inverse_frequencies(kind)[None, :]     # [tokens, half]
    cos = np.cos(angle)[:, None, :]
    sin = np.sin(angle)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def visible(positions, kind):
    """[query, key] mask: causal (k <= q); on sliding layers also q - k < window."""
    q = positions[:, None]
    k = positions[None, :]
    mask = k <= q
    if kind.window is not None:
        mask &= (q - k) < kind.window
    return mask


def softmax(x):
    x = x - np.max(x, axis=-1, keepdims=True)
    e = np.exp(x)
    return e / np.sum(e, axis=-1, keepdims=True)


def attention(a, positions, cfg, kind, lw, act=exact):
    """Self-attention of one layer on normed input a [tokens, hidden]; returns o_proj output."""
    n, hd, eps = a.shape[0], kind.head_dim, cfg.rms_eps
    q = act(linear(a, lw["self_attn.q_proj.weight"])).reshape(n, cfg.heads, hd)
    kraw = act(linear(a, lw["self_attn.k_proj.weight"])).reshape(n, kind.kv_heads, hd)
    q = act(apply_rotary(act(rms(q, lw["self_attn.q_norm.weight"], eps)), positions, kind))
    k = act(apply_rotary(act(rms(kraw, lw["self_attn.k_norm.weight"], eps)), positions, kind))
    if kind.v_from_raw_key:
        v = act(rms(kraw, None, eps))       # the raw key projection, before k_norm and rope
    else:
        vraw = act(linear(a, lw["self_attn.v_proj.weight"])).reshape(n, kind.kv_heads, hd)
        v = act(rms(vraw, None, eps))

    kv_of_head = np.arange(cfg.heads) // (cfg.heads // kind.kv_heads)   # GQA: head j reads j / (heads/kv)
    k, v = k[:, kv_of_head], v[:, kv_of_head]                           # [tokens, heads, hd]
    scores = act(np.einsum("qhd,khd->hqk", q, k) * 1.0)                 # scale 1.0, no 1/sqrt(d)
    scores = np.where(visible(positions, kind)[None], scores, -np.inf)
    probs = act(softmax(scores))
    out = act(np.einsum("hqk,khd->qhd", probs, v)).reshape(n, cfg.heads * hd)
    return act(linear(out, lw["self_attn.o_proj.weight"]))


def mlp(m, lw, act=exact):
    gate = act(linear(m, lw["mlp.gate_proj.weight"]))
    up = act(linear(m, lw["mlp.up_proj.weight"]))
    return act(linear(act(act(gelu_tanh(gate)) * up), lw["mlp.down_proj.weight"]))


class LayerWeights:
    """weights["layers.{i}." + name], so layer code can use the names of MODEL.md §1."""

    def __init__(self, weights, index):
        self._weights, self._prefix = weights, f"layers.{index}."

    def __getitem__(self, name):
        return self._weights[self._prefix + name]


def decoder_layer(h, positions, cfg, kind, lw, act=exact):
    eps = cfg.rms_eps
    a = act(rms(h, lw["input_layernorm.weight"], eps))
    h = act(h + act(rms(attention(a, positions, cfg, kind, lw, act), lw["post_attention_layernorm.weight"], eps)))
    m = act(rms(h, lw["pre_feedforward_layernorm.weight"], eps))
    h = act(h + act(rms(mlp(m, lw, act), lw["post_feedforward_layernorm.weight"], eps)))
    return act(h * lw["layer_scalar"][0])   # the whole stream is scaled


def forward(ckpt, ids, act=exact):
    """Logits float64 [len(ids), vocab] for a prompt whose positions are 0..len(ids)-1.

    `act` rounds each stored activation; the oracle uses `exact`. Tests pass a bf16/fp32
    rounding to estimate how far a correct lower-precision engine may drift.
    """
    cfg, w = ckpt.config, ckpt.weights
    ids = np.asarray(ids, dtype=np.int64)
    if ids.ndim != 1 or ids.size == 0 or ids.min() < 0 or ids.max() >= cfg.vocab:
        raise ValueError(f"ids must be a non-empty list in [0, {cfg.vocab})")
    positions = np.arange(ids.size, dtype=np.float64)
    embed = w["embed_tokens.weight"]
    h = act(embed[ids] * bf16_round(math.sqrt(cfg.hidden)))       # s = bf16(sqrt(hidden))
    for i, layer_type in enumerate(cfg.layer_types):
        h = decoder_layer(h, positions, cfg, cfg.kinds[layer_type], LayerWeights(w, i), act)
    logits = act(linear(act(rms(h, w["norm.weight"], cfg.rms_eps)), embed))   # tied head
    if cfg.softcap is not None:
        logits = cfg.softcap * np.tanh(logits / cfg.softcap)
    return logits


# ----------------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------------

def parse_ids(text):
    return [int(t) for t in text.split(",") if t.strip()]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="checkpoint directory (config.json + safetensors)")
    parser.add_argument("--ids", required=True, help="comma-separated token ids")
    parser.add_argument("--out", required=True, help="output .npy, float64 [n_ids, vocab]")
    args = parser.parse_args(argv)
    logits = forward(load_checkpoint(args.model), parse_ids(args.ids))
    np.save(args.out, logits)
    print(f"wrote {args.out}: {logits.shape[0]}x{logits.shape[1]}, argmax of last position {int(np.argmax(logits[-1]))}")


if __name__ == "__main__":
    main()
