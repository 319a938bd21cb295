#!/usr/bin/python3
"""Float64 reference ("oracle") for the Gemma 4 unified forward pass: text, images and audio.

Written from /work/shared/docs/MODEL.md §1-§3 and MULTIMODAL.md and nothing else; the step
comments quote them. Everything runs in float64 so that the only error left is the engine's.

    oracle.py --model DIR --ids 2,5,9 --out logits.npy
    oracle.py --model DIR --ids 2,255999,258880,...,258882,7 --image F.png [--audio A.wav] --out logits.npy

In --ids each maximal run of 258880 takes the next --image (its length must equal the image's
soft-token count) and each maximal run of 258881 the next --audio.
"""

import argparse
import dataclasses
import json
import math
import os
import struct
import sys

import numpy as np

sys.dont_write_bytecode = True   # keep the source tree free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_np import read_checkpoint_tensors  # noqa: E402
import packed_np  # noqa: E402

SLIDING = "sliding_attention"
FULL = "full_attention"

# Token ids of MODEL.md §1 (the config's values are read when present).
IMAGE_TOKEN = 258880
AUDIO_TOKEN = 258881
BOI_TOKEN = 255999
EOI_TOKEN = 258882
BOA_TOKEN = 256000
EOA_TOKEN = 258883

# Tensor names of MULTIMODAL.md (full names, no prefix is stripped from them).
VISION = "model.vision_embedder."
EMBED_VISION = "model.embed_vision."
EMBED_AUDIO = "model.embed_audio."
MEDIA_PREFIXES = (VISION, EMBED_VISION, EMBED_AUDIO)
AUDIO_RATE = 16000


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
    image_blocks_bidirectional: bool = False   # sliding layers: an image block's tokens see each other


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


@dataclasses.dataclass(frozen=True)
class MediaConfig:
    """Image and audio input geometry (MULTIMODAL.md). LayerNorm eps is PyTorch's default, not read."""
    block: int = 48                 # model_patch_size: patch_size 16 x pooling_kernel_size 3
    posemb_size: int = 1120         # mm_posemb_size: rows of pos_embedding
    max_soft_tokens: int = 280      # num_soft_tokens: the image budget
    layer_norm_eps: float = 1e-5    # patch_ln1, patch_ln2, pos_norm
    vision_rms_eps: float = 1e-6    # the weightless rms before embedding_projection
    audio_frame: int = 640          # audio_samples_per_token
    audio_rms_eps: float = 1e-6
    image_token: int = IMAGE_TOKEN
    audio_token: int = AUDIO_TOKEN


@dataclasses.dataclass
class Checkpoint:
    config: TextConfig
    weights: dict           # tensor name without the model prefix -> float64 ndarray
    media_config: MediaConfig = dataclasses.field(default_factory=MediaConfig)
    media: dict = dataclasses.field(default_factory=dict)   # full name (MEDIA_PREFIXES) -> float64


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
    # HF: full layers take num_global_key_value_heads only when k_eq_v; otherwise num_key_value_heads.
    global_kv_heads = (tc.get("num_global_key_value_heads") or kv_heads) if k_eq_v else kv_heads
    kinds = {
        SLIDING: AttentionKind(
            head_dim=head_dim, kv_heads=kv_heads, v_from_raw_key=False,
            rope_theta=float(rope[SLIDING]["rope_theta"]),
            rotated_pairs=_rotated_pairs(rope[SLIDING], head_dim, SLIDING),
            window=int(tc["sliding_window"]), image_blocks_bidirectional=True),
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


def parse_media_config(raw):
    """MediaConfig from the nested config's vision_config / audio_config and token ids."""
    vc = raw.get("vision_config") or {}
    ac = raw.get("audio_config") or {}
    if "model_patch_size" in vc:
        block = int(vc["model_patch_size"])
    elif "patch_size" in vc and "pooling_kernel_size" in vc:
        block = int(vc["patch_size"]) * int(vc["pooling_kernel_size"])
    else:
        block = 48
    return MediaConfig(
        block=block,
        posemb_size=int(vc.get("mm_posemb_size", 1120)),
        max_soft_tokens=int(vc.get("num_soft_tokens", 280)),
        vision_rms_eps=float(vc.get("rms_norm_eps", 1e-6)),
        audio_frame=int(ac.get("audio_samples_per_token", 640)),
        audio_rms_eps=float(ac.get("rms_norm_eps", 1e-6)),
        image_token=int(raw.get("image_token_id", IMAGE_TOKEN)),
        audio_token=int(raw.get("audio_token_id", AUDIO_TOKEN)))


def expected_media_shapes(cfg, mc):
    """{full name: shape} of the image and audio tensors (MULTIMODAL.md, Checkpoint)."""
    H, P = cfg.hidden, mc.block * mc.block * 3
    return {
        VISION + "patch_ln1.weight": (P,), VISION + "patch_ln1.bias": (P,),
        VISION + "patch_dense.weight": (H, P), VISION + "patch_dense.bias": (H,),
        VISION + "patch_ln2.weight": (H,), VISION + "patch_ln2.bias": (H,),
        VISION + "pos_embedding": (mc.posemb_size, 2, H),
        VISION + "pos_norm.weight": (H,), VISION + "pos_norm.bias": (H,),
        EMBED_VISION + "embedding_projection.weight": (H, H),
        EMBED_AUDIO + "embedding_projection.weight": (H, mc.audio_frame),
    }


def is_media_tensor(name):
    return name.startswith(MEDIA_PREFIXES)


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
    """Drops `model.language_model.` (or `model.` when no tensor carries the longer prefix).
    The image and audio tensors (MEDIA_PREFIXES) are not decoder tensors and are left out."""
    tensors = {name: t for name, t in tensors.items() if not is_media_tensor(name)}
    for prefix in ("model.language_model.", "model."):
        if any(name.startswith(prefix) for name in tensors):
            return {name[len(prefix):]: t for name, t in tensors.items() if name.startswith(prefix)}
    raise ValueError("no tensor starts with model.language_model. or model.")


def check_media_weights(cfg, mc, media):
    """Either no image/audio tensor at all (a text-only checkpoint) or all of them, shaped right."""
    if not media:
        return
    for name, shape in expected_media_shapes(cfg, mc).items():
        if name not in media:
            raise ValueError(f"checkpoint has image/audio tensors but lacks {name}")
        if media[name].shape != shape:
            raise ValueError(f"{name}: shape {media[name].shape}, config implies {shape}")


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
        raw = json.load(f)
    cfg, mc = parse_config(raw), parse_media_config(raw)
    tensors = read_checkpoint_tensors(model_dir)
    group_size = packed_np.scheme(raw)
    if group_size is not None:
        tensors = packed_np.unpacked(tensors, group_size)
    weights = strip_prefix(tensors)
    check_weights(cfg, weights)
    media = {name: t for name, t in tensors.items() if is_media_tensor(name)}
    check_media_weights(cfg, mc, media)
    return Checkpoint(cfg, weights, mc, media)


# ----------------------------------------------------------------------------------------------
# Forward pass (MODEL.md §2)
# ----------------------------------------------------------------------------------------------

def exact(x):
    """Default activation rounding: none (float64 throughout)."""
    return x


def bf16_round(x):
    """Round-to-nearest-even to bfloat16 (via float32), returned as float64. In uint32: a finite
    value's bits + 0x8000 cannot wrap."""
    f = np.array(x, dtype=np.float32)          # a copy: the bits are rounded in place
    bits = f.view(np.uint32)
    bits += np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    bits &= np.uint32(0xFFFF0000)
    return f.astype(np.float64)


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


def visible(positions, kind, image_spans=()):
    """[query, key] mask: causal (k <= q); on sliding layers also q - k < window.

    image_spans: [(start, end)) token index ranges of the image blocks. On sliding layers
    (kind.image_blocks_bidirectional) key k is visible to query q iff (k <= q or both lie in
    the same block) and q - k < window: later keys of q's own block at any distance.
    """
    q = positions[:, None]
    k = positions[None, :]
    mask = k <= q
    if kind.image_blocks_bidirectional and image_spans:
        n = positions.size
        block = np.full(n, -1, dtype=np.int64)
        for b, (start, end) in enumerate(image_spans):
            block[start:end] = b
        mask |= (block[:, None] == block[None, :]) & (block[:, None] >= 0)
    if kind.window is not None:
        mask &= (q - k) < kind.window
    return mask


def softmax(x):
    x = x - np.max(x, axis=-1, keepdims=True)
    e = np.exp(x)
    return e / np.sum(e, axis=-1, keepdims=True)


def attention(a, positions, cfg, kind, lw, act=exact, image_spans=()):
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
    scores = np.where(visible(positions, kind, image_spans)[None], scores, -np.inf)
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


def decoder_layer(h, positions, cfg, kind, lw, act=exact, image_spans=()):
    eps = cfg.rms_eps
    a = act(rms(h, lw["input_layernorm.weight"], eps))
    o = attention(a, positions, cfg, kind, lw, act, image_spans)
    h = act(h + act(rms(o, lw["post_attention_layernorm.weight"], eps)))
    m = act(rms(h, lw["pre_feedforward_layernorm.weight"], eps))
    h = act(h + act(rms(mlp(m, lw, act), lw["post_feedforward_layernorm.weight"], eps)))
    return act(h * lw["layer_scalar"][0])   # the whole stream is scaled


def embedding_scale(cfg):
    """s = bf16(sqrt(hidden)): the reference casts the scale to the weight dtype."""
    return bf16_round(math.sqrt(cfg.hidden))


def embed_text(ckpt, ids, act=exact):
    """h = E[id] · s for every id (placeholders included: their rows are overwritten later)."""
    cfg = ckpt.config
    ids = np.asarray(ids, dtype=np.int64)
    if ids.ndim != 1 or ids.size == 0 or ids.min() < 0 or ids.max() >= cfg.vocab:
        raise ValueError(f"ids must be a non-empty list in [0, {cfg.vocab})")
    return act(ckpt.weights["embed_tokens.weight"][ids] * embedding_scale(cfg))


@dataclasses.dataclass(frozen=True)
class MediaSpans:
    """Token index ranges [start, end) that soft tokens replaced, in prompt order."""
    image: tuple = ()
    audio: tuple = ()


def find_runs(ids, token):
    """Maximal runs [(start, end)) of `token` in ids."""
    ids = np.asarray(ids)
    runs, i, n = [], 0, len(ids)
    while i < n:
        if ids[i] == token:
            j = i
            while j < n and ids[j] == token:
                j += 1
            runs.append((i, j))
            i = j
        else:
            i += 1
    return runs


def embed_inputs(ckpt, ids, act=exact, images=None, audios=None):
    """(h [len(ids), hidden], MediaSpans): text embeddings with each maximal run of the image
    token replaced, in order, by the next image's soft tokens (pixels: uint8 [H', W', 3] as
    prepare_image returns them) and each run of the audio token by the next audio's frames
    (float samples at 16 kHz). Soft tokens are NOT multiplied by the embedding scale.
    With images/audios None the ids are plain text, placeholders included (the text-only path)."""
    h = embed_text(ckpt, ids, act)
    mc = ckpt.media_config
    spans = {}
    for kind, token, inputs, embed in (("image", mc.image_token, images, embed_image),
                                       ("audio", mc.audio_token, audios, embed_audio)):
        if inputs is None:
            spans[kind] = ()
            continue
        runs = find_runs(ids, token)
        if len(runs) != len(inputs):
            raise ValueError(f"{len(runs)} runs of the {kind} token {token} in ids, {len(inputs)} {kind}s given")
        for n, ((start, end), item) in enumerate(zip(runs, inputs)):
            soft = embed(ckpt, item, act)
            if end - start != soft.shape[0]:
                raise ValueError(f"{kind} {n}: the run of {token} at {start} has {end - start} tokens, "
                                 f"the {kind} gives {soft.shape[0]} soft tokens")
            h[start:end] = soft
        spans[kind] = tuple(runs)
    return h, MediaSpans(image=spans["image"], audio=spans["audio"])


def forward_embedded(ckpt, h, image_spans=(), act=exact, logit_rows=None):
    """Logits float64 for an embedded prompt h [tokens, hidden] at positions 0..tokens-1.
    image_spans: the image blocks (sliding-layer masks); logit_rows: the rows to return logits
    for (default all)."""
    cfg, w = ckpt.config, ckpt.weights
    positions = np.arange(h.shape[0], dtype=np.float64)
    for i, layer_type in enumerate(cfg.layer_types):
        h = decoder_layer(h, positions, cfg, cfg.kinds[layer_type], LayerWeights(w, i), act, image_spans)
    if logit_rows is not None:
        h = h[logit_rows]
    embed = w["embed_tokens.weight"]
    normed = act(rms(h, w["norm.weight"], cfg.rms_eps))
    logits = np.empty((normed.shape[0], cfg.vocab))
    for r in range(0, normed.shape[0], 64):         # in row blocks: keeps the temporaries small
        block = act((embed @ normed[r:r + 64].T).T)     # tied head, = linear(normed, embed)
        if cfg.softcap is not None:
            block = cfg.softcap * np.tanh(block / cfg.softcap)
        logits[r:r + 64] = block
    return logits


def forward(ckpt, ids, act=exact, images=None, audios=None):
    """Logits float64 [len(ids), vocab] for a prompt whose positions are 0..len(ids)-1.

    `act` rounds each stored activation; the oracle uses `exact`. Tests pass a bf16/fp32
    rounding to estimate how far a correct lower-precision engine may drift.
    images: pixel arrays (prepare_image) for the runs of 258880, in order; audios: sample
    arrays (load_audio) for the runs of 258881. The image runs are the image blocks of the masks.
    """
    h, spans = embed_inputs(ckpt, ids, act, images, audios)
    return forward_embedded(ckpt, h, spans.image, act)


# ----------------------------------------------------------------------------------------------
# Images (MULTIMODAL.md: Image preprocessing, Vision embedder)
# ----------------------------------------------------------------------------------------------

def target_size(height, width, max_soft_tokens=280, block=48):
    """(H', W'): keep the aspect, multiples of `block`, (H'/block)·(W'/block) <= max_soft_tokens.
    f = sqrt(max_soft_tokens·block² / (H·W)) (645,120 pixels for 280 tokens), H' = floor(f·H/block)·block,
    W' likewise; a side that rounds to 0 becomes `block` and the other min(floor(long/short)·block,
    max_soft_tokens·block)."""
    if height <= 0 or width <= 0:
        raise ValueError(f"image size {width}x{height}")
    target_px = max_soft_tokens * block * block
    f = math.sqrt(target_px / (height * width))
    th = int(math.floor(f * height / block)) * block
    tw = int(math.floor(f * width / block)) * block
    if th == 0 and tw == 0:
        raise ValueError(f"image {width}x{height} would resize to 0x0")
    max_side = max_soft_tokens * block
    if th == 0:
        th, tw = block, min((width // height) * block, max_side)
    elif tw == 0:
        th, tw = min((height // width) * block, max_side), block
    return th, tw


def prepare_image(path, max_soft_tokens=280, block=48):
    """uint8 [H', W', 3]: decode, EXIF orientation, convert("RGB") (alpha dropped, not composited),
    bicubic resize to target_size only when the size differs."""
    from PIL import Image, ImageOps   # only the image path needs PIL
    with Image.open(path) as im:
        im = ImageOps.exif_transpose(im)
        im = im.convert("RGB")
        th, tw = target_size(im.height, im.width, max_soft_tokens, block)
        if (im.height, im.width) != (th, tw):
            im = im.resize((tw, th), getattr(Image, "Resampling", Image).BICUBIC)
        return np.array(im, dtype=np.uint8)


def flatten_block(block):
    """One [b, b, 3] block as a vector, (row, column, channel), channel fastest."""
    return block.reshape(-1)


def image_patches(pixels, block=48):
    """(patches float64 [N, block²·3], positions int [N, 2] as (X, Y)): pixels / 255 cut into
    block×block tiles in raster order, n = Y·(W'/block) + X."""
    pixels = np.asarray(pixels)
    if pixels.ndim != 3 or pixels.shape[2] != 3 or pixels.shape[0] % block or pixels.shape[1] % block:
        raise ValueError(f"pixels must be [H, W, 3] with H, W multiples of {block}, got {pixels.shape}")
    p = pixels.astype(np.float64) / 255.0
    rows, cols = p.shape[0] // block, p.shape[1] // block
    patches, positions = [], []
    for y in range(rows):
        for x in range(cols):
            patches.append(flatten_block(p[y * block:(y + 1) * block, x * block:(x + 1) * block]))
            positions.append((x, y))
    return np.stack(patches), np.array(positions, dtype=np.int64)


def layer_norm(x, w, b, eps):
    """PyTorch LayerNorm over the last axis: two-pass mean and (biased) variance, weight and bias."""
    mean = np.mean(x, axis=-1, keepdims=True)
    d = x - mean
    var = np.mean(d * d, axis=-1, keepdims=True)
    return d / np.sqrt(var + eps) * w + b


def position_embedding(table, positions):
    """pos_embedding[X, 0] + pos_embedding[Y, 1] for positions [N, 2] = (X, Y)."""
    return table[positions[:, 0], 0] + table[positions[:, 1], 1]


def embed_image(ckpt, pixels, act=exact):
    """Soft tokens [N, hidden] of one prepared image (MULTIMODAL.md, Vision embedder)."""
    mc, m = ckpt.media_config, ckpt.media
    if VISION + "patch_dense.weight" not in m:
        raise ValueError("the checkpoint has no vision embedder tensors")
    patches, pos = image_patches(pixels, mc.block)
    if pos.max() >= mc.posemb_size:
        raise ValueError(f"image is {pos[:, 0].max() + 1}x{pos[:, 1].max() + 1} blocks, "
                         f"pos_embedding has {mc.posemb_size} rows")
    eps = mc.layer_norm_eps
    t = act(layer_norm(act(patches), m[VISION + "patch_ln1.weight"], m[VISION + "patch_ln1.bias"], eps))
    t = act(linear(t, m[VISION + "patch_dense.weight"]) + m[VISION + "patch_dense.bias"])
    t = act(layer_norm(t, m[VISION + "patch_ln2.weight"], m[VISION + "patch_ln2.bias"], eps))
    t = act(t + position_embedding(m[VISION + "pos_embedding"], pos))
    t = act(layer_norm(t, m[VISION + "pos_norm.weight"], m[VISION + "pos_norm.bias"], eps))
    t = act(rms(t, None, mc.vision_rms_eps))
    return act(linear(t, m[EMBED_VISION + "embedding_projection.weight"]))


def image_soft_tokens(pixels, block=48):
    """N = (H'/block)·(W'/block) of a prepared image."""
    return (pixels.shape[0] // block) * (pixels.shape[1] // block)


# ----------------------------------------------------------------------------------------------
# Audio (MULTIMODAL.md: Audio)
# ----------------------------------------------------------------------------------------------

def load_audio(path, rate=AUDIO_RATE):
    """float64 mono samples of a RIFF/WAVE file: PCM16 / 32768 or IEEE float32 (also inside
    WAVE_FORMAT_EXTENSIBLE), channels averaged. Other rates are refused (the oracle does not
    resample)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise ValueError(f"{path}: not a RIFF/WAVE file")
    fmt = samples = None
    pos = 12
    while pos + 8 <= len(data):
        chunk, size = data[pos:pos + 4], struct.unpack("<I", data[pos + 4:pos + 8])[0]
        body = data[pos + 8:pos + 8 + size]       # a streamed data size (0xFFFFFFFF) reads to the end
        if chunk == b"fmt ":
            fmt = body
        elif chunk == b"data" and samples is None:
            samples = body
        pos += 8 + size + (size & 1)              # chunks are padded to even length
    if fmt is None or len(fmt) < 16 or samples is None:
        raise ValueError(f"{path}: no fmt or data chunk")
    tag, channels, file_rate, _, align, bits = struct.unpack("<HHIIHH", fmt[:16])
    if tag == 0xFFFE:                             # WAVE_FORMAT_EXTENSIBLE: the GUID's first two bytes
        if len(fmt) < 40:
            raise ValueError(f"{path}: short WAVE_FORMAT_EXTENSIBLE fmt chunk")
        tag = struct.unpack("<H", fmt[24:26])[0]
    if channels < 1:
        raise ValueError(f"{path}: {channels} channels")
    if tag == 1 and bits == 16:
        x = np.frombuffer(samples[:len(samples) // 2 * 2], dtype="<i2").astype(np.float64) / 32768.0
    elif tag == 3 and bits == 32:
        x = np.frombuffer(samples[:len(samples) // 4 * 4], dtype="<f4").astype(np.float64)
    else:
        raise ValueError(f"{path}: format tag {tag} with {bits} bits: only PCM16 and float32 are read")
    if file_rate != rate:
        raise ValueError(f"{path}: {file_rate} Hz; the oracle reads {rate} Hz only (no resampling)")
    x = x[:x.size // channels * channels].reshape(-1, channels)
    return x.mean(axis=1)


def audio_soft_tokens(samples, frame=640):
    """T = ceil(samples / frame)."""
    return -(-len(samples) // frame)


def embed_audio(ckpt, samples, act=exact):
    """Soft tokens [T, hidden]: samples zero-padded to a multiple of the frame (640), per frame
    rms (no weight, eps 1e-6) · W_audioᵀ."""
    mc, m = ckpt.media_config, ckpt.media
    name = EMBED_AUDIO + "embedding_projection.weight"
    if name not in m:
        raise ValueError("the checkpoint has no audio embedding tensor")
    s = np.asarray(samples, dtype=np.float64).reshape(-1)
    if s.size == 0:
        raise ValueError("empty audio")
    t_count = audio_soft_tokens(s, mc.audio_frame)
    frames = np.zeros(t_count * mc.audio_frame)
    frames[:s.size] = s
    frames = act(frames.reshape(t_count, mc.audio_frame))
    return act(linear(act(rms(frames, None, mc.audio_rms_eps)), m[name]))


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
    parser.add_argument("--image", action="append", default=[], help="image file for the next run of 258880")
    parser.add_argument("--audio", action="append", default=[], help="16 kHz WAV for the next run of 258881")
    args = parser.parse_args(argv)
    ckpt = load_checkpoint(args.model)
    mc = ckpt.media_config
    images = [prepare_image(p, mc.max_soft_tokens, mc.block) for p in args.image] if args.image else None
    audios = [load_audio(p) for p in args.audio] if args.audio else None
    logits = forward(ckpt, parse_ids(args.ids), images=images, audios=audios)
    np.save(args.out, logits)
    print(f"wrote {args.out}: {logits.shape[0]}x{logits.shape[1]}, argmax of last position {int(np.argmax(logits[-1]))}")


if __name__ == "__main__":
    main()
