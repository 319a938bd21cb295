"""Random Gemma 4 unified checkpoints in the Hugging Face layout of MODEL.md §1, written with numpy:
the text stack and (Spec.multimodal, the default) the image and audio input tensors of MULTIMODAL.md.

Used by the oracle's self-tests (and by check_engine.py --emulate) so the oracle can be exercised
without the C++ engine. The safetensors writer here shares no code with safetensors_np's reader.

Scales follow MODEL.md §5: q/k norm gains ≈ head_dim^(-1/4) keep attention scores O(1), so the
network is not chaotic and precision differences stay small next to real bugs.

The image/audio tensors are uniform, centre ± half-width (media_init), chosen so every stage of
the embedder is O(1) and a soft token has unit RMS like a scaled text embedding:
LayerNorm weights 1 ± 0.1 and biases 0 ± 0.1, patch_dense 0 ± sqrt(3/6912) (unit-variance output
from a normalised patch) with bias 0 ± 0.1, pos_embedding 0 ± 1 (the two position rows together
are about as large as the content), projections 0 ± sqrt(3/in) (in = H or 640).
"""

import dataclasses
import json
import math
import os
import struct

import numpy as np

SLIDING = "sliding_attention"
FULL = "full_attention"

# Image/audio geometry of MULTIMODAL.md.
BLOCK = 48            # model_patch_size
PATCH = BLOCK * BLOCK * 3
POSEMB = 1120
AUDIO_FRAME = 640
VISION = "model.vision_embedder."


@dataclasses.dataclass
class Spec:
    layers: int = 4
    hidden: int = 96
    intermediate: int = 160
    heads: int = 4
    head_dim: int = 16
    kv_heads: int = 2
    global_head_dim: int = 32
    global_kv_heads: int = 1
    vocab: int = 512
    window: int = 8
    layer_types: tuple | None = None        # default: full at i % full_period == full_period - 1
    full_period: int = 2
    k_eq_v: bool = True
    partial_rotary: float = 0.25
    sliding_theta: float = 10000.0
    full_theta: float = 1000000.0
    softcap: float | None = 30.0
    eps: float = 1e-6
    seed: int = 0
    dtype: str = "BF16"                     # BF16 | F16 | F32
    shards: int = 1
    flat_config: bool = False
    legacy_rope_keys: bool = False          # rope_theta / rope_local_base_freq / partial_rotary_factor
    prefix: str = "model.language_model."
    embed_std: float | None = None          # default 2/sqrt(hidden): logits O(2)
    layer_scalar_range: tuple = (0.3, 1.5)
    multimodal: bool = True                 # write the image/audio tensors and vision/audio configs

    def types(self):
        if self.layer_types is not None:
            return tuple(self.layer_types)
        p = self.full_period
        return tuple(FULL if i % p == p - 1 else SLIDING for i in range(self.layers))

    def full_kv_heads(self):
        # HF's count: the global one only when k_eq_v, else num_key_value_heads.
        return self.global_kv_heads if self.k_eq_v else self.kv_heads


def text_config(spec):
    tc = {
        "model_type": "gemma4_unified_text",
        "hidden_size": spec.hidden,
        "intermediate_size": spec.intermediate,
        "vocab_size": spec.vocab,
        "num_hidden_layers": spec.layers,
        "num_attention_heads": spec.heads,
        "head_dim": spec.head_dim,
        "num_key_value_heads": spec.kv_heads,
        "global_head_dim": spec.global_head_dim,
        "num_global_key_value_heads": spec.global_kv_heads,
        "layer_types": list(spec.types()),
        "attention_k_eq_v": spec.k_eq_v,
        "sliding_window": spec.window,
        "rms_norm_eps": spec.eps,
        "final_logit_softcapping": spec.softcap,
        "max_position_embeddings": 262144,
        "num_kv_shared_layers": 0,
        "enable_moe_block": False,
        "hidden_size_per_layer_input": 0,
        "hidden_activation": "gelu_pytorch_tanh",
        "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
    }
    if spec.legacy_rope_keys:
        tc["rope_theta"] = spec.full_theta
        tc["rope_local_base_freq"] = spec.sliding_theta
        tc["partial_rotary_factor"] = spec.partial_rotary
    else:
        tc["rope_parameters"] = {
            SLIDING: {"rope_type": "default", "rope_theta": spec.sliding_theta},
            FULL: {"rope_type": "proportional", "partial_rotary_factor": spec.partial_rotary,
                   "rope_theta": spec.full_theta},
        }
    return tc


def vision_config(spec):
    return {"model_type": "gemma4_unified_vision", "patch_size": 16, "pooling_kernel_size": 3,
            "model_patch_size": BLOCK, "mm_embed_dim": spec.hidden, "mm_posemb_size": POSEMB,
            "num_soft_tokens": 280, "output_proj_dims": spec.hidden, "rms_norm_eps": 1e-6}


def audio_config(spec):
    return {"model_type": "gemma4_unified_audio", "audio_embed_dim": AUDIO_FRAME,
            "audio_samples_per_token": AUDIO_FRAME, "hidden_size": AUDIO_FRAME,
            "output_proj_dims": AUDIO_FRAME, "rms_norm_eps": 1e-6}


def full_config(spec):
    tc = text_config(spec)
    if spec.flat_config:
        return tc
    return {
        "architectures": ["Gemma4UnifiedForConditionalGeneration"],
        "model_type": "gemma4_unified",
        "text_config": tc,
        "vision_config": vision_config(spec) if spec.multimodal else {},
        "audio_config": audio_config(spec) if spec.multimodal else {},
        "image_token_id": 258880, "boi_token_id": 255999, "eoi_token_id": 258882,
        "audio_token_id": 258881, "boa_token_id": 256000, "eoa_token_index": 258883,
        "video_token_id": 258884,
    }


def media_init(hidden):
    """{full name: (shape, centre, half-width)} of the image/audio tensors (uniform draws)."""
    H = hidden
    return {
        VISION + "patch_ln1.weight": ((PATCH,), 1.0, 0.1),
        VISION + "patch_ln1.bias": ((PATCH,), 0.0, 0.1),
        VISION + "patch_dense.weight": ((H, PATCH), 0.0, math.sqrt(3.0 / PATCH)),
        VISION + "patch_dense.bias": ((H,), 0.0, 0.1),
        VISION + "patch_ln2.weight": ((H,), 1.0, 0.1),
        VISION + "patch_ln2.bias": ((H,), 0.0, 0.1),
        VISION + "pos_embedding": ((POSEMB, 2, H), 0.0, 1.0),
        VISION + "pos_norm.weight": ((H,), 1.0, 0.1),
        VISION + "pos_norm.bias": ((H,), 0.0, 0.1),
        "model.embed_vision.embedding_projection.weight": ((H, H), 0.0, math.sqrt(3.0 / H)),
        "model.embed_audio.embedding_projection.weight": ((H, AUDIO_FRAME), 0.0, math.sqrt(3.0 / AUDIO_FRAME)),
    }


def is_media_name(name):
    return name.startswith(("model.vision_embedder.", "model.embed_vision.", "model.embed_audio."))


def random_media_weights(spec):
    """{full name: float64 array}; a generator of its own, so the text weights of a seed do not
    depend on spec.multimodal."""
    rng = np.random.default_rng([spec.seed, 0x6D6D])
    return {name: rng.uniform(centre - half, centre + half, size=shape)
            for name, (shape, centre, half) in media_init(spec.hidden).items()}


def random_weights(spec):
    """{name without prefix: float64 array} drawn from the seeded generator; with
    spec.multimodal also the image/audio tensors under their full names (model.vision_embedder. ...)."""
    rng = np.random.default_rng(spec.seed)
    H, I = spec.hidden, spec.intermediate

    def matrix(out, inp):
        return rng.normal(0.0, 1.0 / math.sqrt(inp), size=(out, inp))

    def gain(n, centre):
        return centre * rng.uniform(0.8, 1.2, size=n)

    embed_std = spec.embed_std if spec.embed_std is not None else 2.0 / math.sqrt(H)
    w = {"embed_tokens.weight": rng.normal(0.0, embed_std, size=(spec.vocab, H)),
         "norm.weight": gain(H, 1.0)}
    for i, t in enumerate(spec.types()):
        hd = spec.global_head_dim if t == FULL else spec.head_dim
        kv = spec.full_kv_heads() if t == FULL else spec.kv_heads
        p = f"layers.{i}."
        for norm in ("input_layernorm", "post_attention_layernorm",
                     "pre_feedforward_layernorm", "post_feedforward_layernorm"):
            w[p + norm + ".weight"] = gain(H, 1.0)
        w[p + "layer_scalar"] = rng.uniform(*spec.layer_scalar_range, size=1)
        w[p + "mlp.gate_proj.weight"] = matrix(I, H)
        w[p + "mlp.up_proj.weight"] = matrix(I, H)
        w[p + "mlp.down_proj.weight"] = matrix(H, I)
        w[p + "self_attn.q_proj.weight"] = matrix(spec.heads * hd, H)
        w[p + "self_attn.k_proj.weight"] = matrix(kv * hd, H)
        if not (t == FULL and spec.k_eq_v):
            w[p + "self_attn.v_proj.weight"] = matrix(kv * hd, H)
        w[p + "self_attn.o_proj.weight"] = matrix(H, spec.heads * hd)
        w[p + "self_attn.q_norm.weight"] = gain(hd, hd ** -0.25)
        w[p + "self_attn.k_norm.weight"] = gain(hd, hd ** -0.25)
    if spec.multimodal:
        w.update(random_media_weights(spec))
    return w


# ----------------------------------------------------------------------------------------------
# safetensors writing
# ----------------------------------------------------------------------------------------------

def encode(values, dtype):
    """Returns (raw little-endian bytes, the float64 values those bytes decode to)."""
    if dtype == "F32":
        stored = np.asarray(values, dtype="<f4")
        return stored.tobytes(), stored.astype(np.float64)
    if dtype == "F16":
        stored = np.asarray(values, dtype="<f2")
        return stored.tobytes(), stored.astype(np.float64)
    if dtype == "BF16":
        # Round-to-nearest-even on the float32 bit pattern, keeping the high 16 bits.
        f32 = np.ascontiguousarray(values, dtype=np.float32)
        u = f32.view(np.uint32).astype(np.uint64)
        lsb = (u >> np.uint64(16)) & np.uint64(1)
        hi = ((u + np.uint64(0x7FFF) + lsb) >> np.uint64(16)).astype("<u2")
        decoded = (hi.astype(np.uint32) * np.uint32(65536)).view(np.float32)
        return hi.tobytes(), decoded.astype(np.float64)
    raise ValueError(f"unsupported dtype {dtype}")


def write_safetensors(path, tensors, dtype):
    """tensors: {full name: array}. Returns {full name: float64 value as stored}."""
    header, blobs, stored, offset = {}, [], {}, 0
    for name in sorted(tensors):
        raw, decoded = encode(tensors[name], dtype)
        header[name] = {"dtype": dtype, "shape": list(np.shape(tensors[name])),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        stored[name] = decoded
        offset += len(raw)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)         # the format allows padding the header with spaces
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)
    return stored


def write_checkpoint(out_dir, spec, weights=None):
    """Writes config.json and weights; returns {name: float64 as stored} under the names of
    `weights` (decoder tensors without prefix, image/audio tensors under their full names)."""
    os.makedirs(out_dir, exist_ok=True)
    for name in os.listdir(out_dir):
        if name.endswith(".safetensors") or name.endswith(".json"):
            os.remove(os.path.join(out_dir, name))
    weights = random_weights(spec) if weights is None else weights
    full_names = {(name if is_media_name(name) else spec.prefix + name): value for name, value in weights.items()}
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(full_config(spec), f, indent=1)
    stored = {}
    if spec.shards <= 1:
        stored = write_safetensors(os.path.join(out_dir, "model.safetensors"), full_names, spec.dtype)
    else:
        names = sorted(full_names)
        weight_map = {}
        for s in range(spec.shards):
            shard = f"model-{s + 1:05d}-of-{spec.shards:05d}.safetensors"
            part = {n: full_names[n] for n in names[s::spec.shards]}
            stored.update(write_safetensors(os.path.join(out_dir, shard), part, spec.dtype))
            weight_map.update({n: shard for n in part})
        total = sum(v.size for v in stored.values()) * {"F32": 4, "F16": 2, "BF16": 2}[spec.dtype]
        with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)
    return {(name if is_media_name(name) else name[len(spec.prefix):]): value for name, value in stored.items()}
