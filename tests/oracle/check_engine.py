#!/usr/bin/python3
"""Holds the C++ engine to the float64 oracle (MODEL.md §5, MULTIMODAL.md).

Text cases (the default group): `layerpipe make-checkpoint` writes a random checkpoint, a seeded
40-token prompt runs through the oracle and through `layerpipe score` (fp32 and bf16), and
`layerpipe generate` (greedy, 32 tokens) is checked teacher-forced against the oracle. On every
checkpoint, negative controls show that the oracle with a known bug moves logits by more than the
bf16 bound, and an activation-rounded oracle shows a correct lower-precision engine fits inside it.

Multimodal cases (`--cases multimodal`): checkpoints with vocab 262144 and the image/audio
tensors, sliding window shorter than an image block; prompts with generated PNG/JPEG images and
16 kHz WAV audio go through `layerpipe score --image F --audio A` (the soft-token runs of --ids
take the files in order) and `layerpipe generate --image F`; `--prefill-chunk 7` must give
bit-identical logits; negative controls cover the image/audio path.

    check_engine.py --bin build/bin --work /tmp/oracle_work                       # text cases
    check_engine.py --bin build/bin --work /tmp/oracle_mm --cases multimodal      # image/audio cases
    check_engine.py --emulate --work /tmp/oracle_work [--cases all]               # driver dry run, no engine
"""

import argparse
import contextlib
import dataclasses
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import time
import wave

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True   # keep the source tree free of __pycache__
sys.path.insert(0, HERE)
import np_checkpoint  # noqa: E402
import oracle  # noqa: E402
from oracle import FULL, SLIDING  # noqa: E402

PROMPT_LEN = 40
NEW_TOKENS = 32
STOP_IDS = (1, 106, 50)
FP32_MAX = 2e-2
BF16_MEDIAN = 0.35
BF16_MAX = 1.0
GREEDY_TOL = {"fp32": 2e-2, "bf16": 1.0}
CONTROL_MIN = 1.0
# Images the engine resizes (or decodes from JPEG) itself agree with Pillow's only to about one
# level in 255; their fp32 logits are held to the bf16-sized bounds instead of FP32_MAX. Each
# such prompt first shows that ±1/255 on every value (the worst case) fits inside them, and the
# preparation bugs of resize_controls must exceed RESIZED_MAX.
RESIZED_MEDIAN = 0.35
RESIZED_MAX = 1.0


@dataclasses.dataclass
class Case:
    name: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    head_dim: int
    kv_heads: int
    global_head_dim: int
    global_kv_heads: int
    vocab: int
    window: int
    full_period: int
    k_eq_v: bool
    partial_rotary: float
    seed: int
    layer_types: tuple | None = None      # "s"/"f" per layer; default from full_period
    shards: int = 1
    flat_config: bool = False
    prompt_len: int = PROMPT_LEN

    def types(self):
        if self.layer_types is not None:
            return tuple(FULL if t == "f" else SLIDING for t in self.layer_types)
        p = self.full_period
        return tuple(FULL if i % p == p - 1 else SLIDING for i in range(self.layers))


CASES = [
    # window 8 < prompt, 2 full layers, k_eq_v, GQA 2:1 (sliding) and 4:1 (full), hidden 96.
    Case("win8_keqv_h96", layers=4, hidden=96, intermediate=160, heads=4, head_dim=16, kv_heads=2,
         global_head_dim=32, global_kv_heads=1, vocab=512, window=8, full_period=2, k_eq_v=True,
         partial_rotary=0.25, seed=101),
    # Full layers with v_proj, so they take num_key_value_heads (8, GQA 2:1) and not the global count (1)
    # as HF does; partial rotary 0.5, 3 shards, hidden 160.
    Case("gqa16_vproj_shards", layers=6, hidden=160, intermediate=256, heads=16, head_dim=16, kv_heads=8,
         global_head_dim=32, global_kv_heads=1, vocab=768, window=12, full_period=3, k_eq_v=False,
         partial_rotary=0.5, seed=202, shards=3),
    # Flat config, explicit layer types, GQA 16:1 on sliding layers, partial rotary 0.125.
    Case("flat_types_gqa16", layers=3, hidden=128, intermediate=256, heads=16, head_dim=8, kv_heads=1,
         global_head_dim=64, global_kv_heads=2, vocab=1000, window=16, full_period=6, k_eq_v=True,
         partial_rotary=0.125, seed=303, layer_types=("s", "f", "s"), flat_config=True),
    # Full layer first; window 64 covers the prompt but not prompt + generated tokens.
    Case("full_first_win64", layers=2, hidden=256, intermediate=384, heads=8, head_dim=32, kv_heads=4,
         global_head_dim=64, global_kv_heads=4, vocab=600, window=64, full_period=6, k_eq_v=True,
         partial_rotary=0.25, seed=404, layer_types=("f", "s")),
    # A longer prompt: positions past 100 turn even the slowest pair that partial rotary keeps,
    # so dropping the factor becomes visible; the window (24) is crossed many times over.
    Case("long128_win24", layers=4, hidden=192, intermediate=320, heads=8, head_dim=24, kv_heads=2,
         global_head_dim=64, global_kv_heads=1, vocab=640, window=24, full_period=2, k_eq_v=True,
         partial_rotary=0.25, seed=505, prompt_len=128),
]


# ----------------------------------------------------------------------------------------------
# Engines
# ----------------------------------------------------------------------------------------------

class CliEngine:
    """The `layerpipe` binary."""

    def __init__(self, bin_dir, timeout, device="cpu", quantize="none", quantize_head="none"):
        self.exe = os.path.join(bin_dir, "layerpipe")
        self.timeout = timeout
        self.device = device
        self.quantize = quantize
        self.quantize_head = quantize_head
        self.checkpoint = "none"    # `make-checkpoint --quantization`
        self.kernel_lines = set()   # what the CPU stages said they run (cpu_backend.cc logs it once)
        if not os.access(self.exe, os.X_OK):
            raise SystemExit(f"FAIL: {self.exe} is missing or not executable (pass --bin or set LAYERPIPE_BIN)")

    def _run(self, args):
        cmd = [self.exe] + args
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            raise CheckFailure(f"timed out after {self.timeout}s: {' '.join(cmd)}")
        if done.returncode != 0:
            raise CheckFailure(f"exit {done.returncode}: {' '.join(cmd)}\n{done.stderr.strip()[-2000:]}")
        self.kernel_lines.update(m.group(1) for m in re.finditer(r"CPU stages: \d+ threads, (matmul kernel .*)", done.stderr))
        return done.stdout

    def make_checkpoint(self, out_dir, case, quantization=None):
        args = ["make-checkpoint", "--out", out_dir, "--layers", case.layers, "--hidden", case.hidden,
                "--intermediate", case.intermediate, "--heads", case.heads, "--head-dim", case.head_dim,
                "--kv-heads", case.kv_heads, "--global-head-dim", case.global_head_dim,
                "--global-kv-heads", case.global_kv_heads, "--vocab", case.vocab, "--window", case.window,
                "--full-period", case.full_period, f"--k-eq-v={'true' if case.k_eq_v else 'false'}",
                "--partial-rotary", case.partial_rotary, "--seed", case.seed]
        if case.layer_types is not None:
            args += ["--layer-types", ",".join(case.layer_types)]
        args += ["--shards", case.shards]        # explicit, so 1 means a single model.safetensors
        if case.flat_config:
            args += ["--flat-config"]
        args += ["--quantization", quantization or self.checkpoint]
        self._run([str(a) for a in args])

    @staticmethod
    def _media_args(images, audios):
        args = []
        for path in images:
            args += ["--image", path]
        for path in audios:
            args += ["--audio", path]
        return args

    def score_raw(self, model_dir, ids, precision, out_path, images=(), audios=(), extra=()):
        """The logits as written (float32 [n, vocab])."""
        self._run(["score", "--model", model_dir, "--ids", ",".join(map(str, ids))]
                  + self._media_args(images, audios)
                  + ["--logits-out", out_path, "--precision", precision, "--device", self.device,
                     "--quantize", self.quantize, "--quantize-head", self.quantize_head] + list(extra))
        return np.load(out_path)

    def score(self, model_dir, ids, precision, out_path, images=(), audios=(), extra=()):
        return self.score_raw(model_dir, ids, precision, out_path, images, audios, extra).astype(np.float64)

    def generate(self, model_dir, ids, n, precision, images=(), audios=()):
        out = self._run(["generate", "--model", model_dir, "--ids", ",".join(map(str, ids))]
                        + self._media_args(images, audios)
                        + ["--max-new-tokens", str(n), "--print-ids", "--precision", precision,
                           "--device", self.device, "--quantize", self.quantize,
                           "--quantize-head", self.quantize_head])
        lines = out.strip().splitlines()
        last = lines[-1].strip() if lines else ""
        try:
            return [int(t) for t in last.split(",") if t.strip()]
        except ValueError:
            raise CheckFailure(f"generate: last stdout line is not comma-separated ids: {last[:200]!r}")


def float32_round(x):
    return np.asarray(x, dtype=np.float32).astype(np.float64)


ROUNDING = {"fp32": float32_round, "bf16": oracle.bf16_round}


class EmulatedEngine:
    """Stands in for the engine to dry-run this driver: the numpy checkpoint writer plus the
    oracle with every activation rounded to the requested precision. Media files go through the
    oracle's own preparation (so resized images match exactly); --prefill-chunk is ignored (the
    oracle has no chunks, so the chunking check is trivially met here: the last score is reused)."""

    def __init__(self):
        self._last = None       # (key, logits) of the last score_raw call

    def make_checkpoint(self, out_dir, case, quantization=None):
        if quantization not in (None, "none"):
            raise SystemExit("FAIL: --emulate writes bf16 checkpoints only (no --checkpoint w4a16)")
        spec = np_checkpoint.Spec(
            layers=case.layers, hidden=case.hidden, intermediate=case.intermediate, heads=case.heads,
            head_dim=case.head_dim, kv_heads=case.kv_heads, global_head_dim=case.global_head_dim,
            global_kv_heads=case.global_kv_heads, vocab=case.vocab, window=case.window,
            layer_types=case.types(), k_eq_v=case.k_eq_v, partial_rotary=case.partial_rotary,
            seed=case.seed, shards=case.shards, flat_config=case.flat_config)
        np_checkpoint.write_checkpoint(out_dir, spec)

    @staticmethod
    def _media(ckpt, images, audios):
        mc = ckpt.media_config
        pixels = [oracle.prepare_image(p, mc.max_soft_tokens, mc.block) for p in images] if images else None
        samples = [oracle.load_audio(p) for p in audios] if audios else None
        return pixels, samples

    def score_raw(self, model_dir, ids, precision, out_path, images=(), audios=(), extra=()):
        key = (model_dir, tuple(ids), precision, tuple(images), tuple(audios))
        if self._last is None or self._last[0] != key:
            self._last = (key, self.score(model_dir, ids, precision, out_path, images, audios).astype(np.float32))
        return self._last[1].copy()

    def score(self, model_dir, ids, precision, out_path, images=(), audios=(), extra=()):
        ckpt = oracle.load_checkpoint(model_dir)
        pixels, samples = self._media(ckpt, images, audios)
        return oracle.forward(ckpt, ids, act=ROUNDING[precision], images=pixels, audios=samples)

    def generate(self, model_dir, ids, n, precision, images=(), audios=()):
        ckpt = oracle.load_checkpoint(model_dir)
        act = ROUNDING[precision]
        pixels, samples = self._media(ckpt, images, audios)
        h, spans = oracle.embed_inputs(ckpt, ids, act, pixels, samples)
        out = []
        for _ in range(n):      # decode is causal: the last row of the whole sequence each step
            nxt = int(np.argmax(oracle.forward_embedded(ckpt, h, spans.image, act, logit_rows=[-1])[-1]))
            out.append(nxt)
            h = np.concatenate([h, oracle.embed_text(ckpt, [nxt], act)])
            if nxt in STOP_IDS:
                break
        return out


class CheckFailure(Exception):
    pass


# ----------------------------------------------------------------------------------------------
# Negative controls: the oracle with one known bug, expressed as a changed checkpoint or a
# swapped function, so oracle.py itself stays the plain reading of MODEL.md.
# ----------------------------------------------------------------------------------------------

def with_weights(ckpt, fn):
    return dataclasses.replace(ckpt, weights={n: fn(n, w) for n, w in ckpt.weights.items()})


def with_kind(ckpt, layer_type, **changes):
    kinds = dict(ckpt.config.kinds)
    kinds[layer_type] = dataclasses.replace(kinds[layer_type], **changes)
    return dataclasses.replace(ckpt, config=dataclasses.replace(ckpt.config, kinds=kinds))


def norm_one_plus_w(ckpt):
    return with_weights(ckpt, lambda n, w: w + 1.0 if n.endswith("norm.weight") else w)


def no_layer_scalar(ckpt):
    return with_weights(ckpt, lambda n, w: np.ones_like(w) if n.endswith("layer_scalar") else w)


def score_scale_rsqrt_d(ckpt):
    # Scores are linear in q, so scaling q_norm by d^-1/2 is a 1/sqrt(d) attention scale.
    def fn(n, w):
        return w / np.sqrt(w.size) if n.endswith("q_norm.weight") else w
    return with_weights(ckpt, fn)


def gqa_modulo(ckpt):
    # Head j reading kv j % kv instead of j // (heads/kv) equals the right mapping applied to a
    # model whose query heads are permuted by perm(j) = (j % group) * kv + j // group.
    cfg = ckpt.config

    def fn(n, w):
        layer = n.split(".")[1] if n.startswith("layers.") else None
        if layer is None or not (n.endswith("q_proj.weight") or n.endswith("o_proj.weight")):
            return w
        kind = cfg.kinds[cfg.layer_types[int(layer)]]
        kv, hd = kind.kv_heads, kind.head_dim
        group = cfg.heads // kv
        perm = [(j % group) * kv + j // group for j in range(cfg.heads)]
        rows = np.concatenate([np.arange(p * hd, (p + 1) * hd) for p in perm])
        return w[rows] if n.endswith("q_proj.weight") else w[:, rows]
    return with_weights(ckpt, fn)


def interleaved_rotary(x, positions, kind):
    angle = positions[:, None] * oracle.inverse_frequencies(kind)[None, :]
    cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
    out = x.copy()
    out[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
    out[..., 1::2] = x[..., 1::2] * cos + x[..., 0::2] * sin
    return out


def partial_exponent_over_rotated_dims(kind):
    # theta^(-2i/(2n)) instead of theta^(-2i/head_dim): the frequencies of an ordinary rope of
    # dimension 2n.
    inv_freq = np.zeros(kind.head_dim // 2)
    n = kind.rotated_pairs
    inv_freq[:n] = kind.rope_theta ** (-2.0 * np.arange(n) / (2 * n))
    return inv_freq


def partial_pairs_within_rotated_dims(x, positions, kind):
    # Rotate-half inside the first 2n dims (dim j pairs with j + n), the rest passed through.
    n = kind.rotated_pairs
    inv_freq = oracle.inverse_frequencies(kind)[:n]
    angle = positions[:, None] * inv_freq[None, :]
    cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
    x1, x2 = x[..., :n], x[..., n:2 * n]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin, x[..., 2 * n:]], axis=-1)


@contextlib.contextmanager
def swapped(module, name, replacement):
    original = getattr(module, name)
    setattr(module, name, replacement)
    try:
        yield
    finally:
        setattr(module, name, original)


def controls(ckpt, ids):
    """[(name, perturbed logits)] for every control that applies to this checkpoint."""
    cfg = ckpt.config
    types = set(cfg.layer_types)
    out = [("norm 1+w", oracle.forward(norm_one_plus_w(ckpt), ids)),
           ("no layer_scalar", oracle.forward(no_layer_scalar(ckpt), ids)),
           ("scale 1/sqrt(d)", oracle.forward(score_scale_rsqrt_d(ckpt), ids))]
    with swapped(oracle, "apply_rotary", interleaved_rotary):
        out.append(("interleaved rotary", oracle.forward(ckpt, ids)))
    if SLIDING in types and cfg.kinds[SLIDING].window < len(ids):
        out.append(("no window", oracle.forward(with_kind(ckpt, SLIDING, window=None), ids)))
    full = cfg.kinds[FULL]
    if FULL in types and full.rotated_pairs < full.head_dim // 2:
        out.append(("partial factor ignored",
                    oracle.forward(with_kind(ckpt, FULL, rotated_pairs=full.head_dim // 2), ids)))
        with swapped(oracle, "inverse_frequencies", partial_exponent_over_rotated_dims):
            out.append(("partial: theta^(-i/n)", oracle.forward(ckpt, ids)))
        with swapped(oracle, "apply_rotary", partial_pairs_within_rotated_dims):
            out.append(("partial: j pairs j+n", oracle.forward(ckpt, ids)))
    if any(1 < cfg.kinds[t].kv_heads < cfg.heads for t in types):
        out.append(("GQA j % kv", oracle.forward(gqa_modulo(ckpt), ids)))
    return out


# ----------------------------------------------------------------------------------------------
# Checks
# ----------------------------------------------------------------------------------------------

def check_layout(ckpt, case):
    """The engine's writer must produce what the case asked for, or the comparison proves less."""
    cfg = ckpt.config
    problems = []
    if cfg.layer_types != case.types():
        problems.append(f"layer_types {cfg.layer_types} != requested {case.types()}")
    if cfg.kinds[SLIDING].window != case.window:
        problems.append(f"sliding_window {cfg.kinds[SLIDING].window} != {case.window}")
    if cfg.kinds[FULL].v_from_raw_key != case.k_eq_v:
        problems.append(f"attention_k_eq_v {cfg.kinds[FULL].v_from_raw_key} != {case.k_eq_v}")
    want_pairs = int(case.partial_rotary * case.global_head_dim / 2)
    if cfg.kinds[FULL].rotated_pairs != want_pairs:
        problems.append(f"full-layer rotated pairs {cfg.kinds[FULL].rotated_pairs} != {want_pairs}")
    full_kv = case.global_kv_heads if case.k_eq_v else case.kv_heads  # HF's rule (MODEL.md §1)
    for t, hd, kv in ((SLIDING, case.head_dim, case.kv_heads), (FULL, case.global_head_dim, full_kv)):
        if (cfg.kinds[t].head_dim, cfg.kinds[t].kv_heads) != (hd, kv):
            problems.append(f"{t}: head_dim/kv {cfg.kinds[t].head_dim}/{cfg.kinds[t].kv_heads} != {hd}/{kv}")
    scalars = [float(ckpt.weights[f"layers.{i}.layer_scalar"][0]) for i in range(len(cfg.layer_types))]
    if len(set(scalars)) < 2 or all(abs(s - 1.0) < 1e-3 for s in scalars):
        problems.append(f"layer scalars are not random: {scalars}")
    for i, t in enumerate(cfg.layer_types):
        hd = cfg.kinds[t].head_dim
        g = np.median(np.abs(ckpt.weights[f"layers.{i}.self_attn.q_norm.weight"]))
        if not 0.4 * hd ** -0.25 < g < 2.5 * hd ** -0.25:
            problems.append(f"layer {i} q_norm gains ~{g:.3f}, MODEL.md §5 asks ≈ head_dim^-1/4 = {hd ** -0.25:.3f}")
            break
    if problems:
        raise CheckFailure("checkpoint written by make-checkpoint does not match the case: " + "; ".join(problems))


def row_max_abs(a, b):
    """max over the vocabulary of |a - b| per row, in row blocks (no [n, vocab] temporary)."""
    return np.concatenate([np.abs(a[r:r + 64] - b[r:r + 64]).max(axis=1) for r in range(0, a.shape[0], 64)])


def compare_score(ref, got, precision, row, bounds=None):
    """Records per-position stats in row[precision]; returns an error message or None.
    bounds: (median, max) of the per-position max |Δlogit| instead of the precision's own."""
    if got.shape != ref.shape:
        return f"score {precision}: logits shape {got.shape}, expected {ref.shape}"
    if not np.all(np.isfinite(got)):
        bad = sorted(set(np.nonzero(~np.isfinite(got))[0].tolist()))
        return f"score {precision}: non-finite logits at positions {bad[:10]}"
    per_pos = row_max_abs(got, ref)
    worst = int(np.argmax(per_pos))
    row[precision] = {"max": float(per_pos.max()), "median": float(np.median(per_pos))}
    if bounds is not None:
        median_bound, max_bound = bounds
    elif precision == "fp32":
        median_bound, max_bound = None, FP32_MAX
    else:
        median_bound, max_bound = BF16_MEDIAN, BF16_MAX
    bound = f"max {max_bound}" if median_bound is None else f"median {median_bound}, max {max_bound}"
    ok = per_pos.max() <= max_bound and (median_bound is None or np.median(per_pos) <= median_bound)
    first_bad = np.nonzero(per_pos > max_bound)[0]
    if ok:
        return None
    first = f"first position over {max_bound}: " + (f"{first_bad[0]}" if first_bad.size else "none")
    return (f"score {precision}: max |Δlogit| {per_pos.max():.4g} at position {worst} (engine argmax "
            f"{int(np.argmax(got[worst]))}, oracle {int(np.argmax(ref[worst]))}), median {np.median(per_pos):.4g}; "
            f"bound {bound}; {first}\n    per-position max |Δ|: " + " ".join(f"{d:.3g}" for d in per_pos))


def check_greedy(ckpt, prompt, generated, precision, row, images=None, audios=None):
    """Teacher-forced: each generated token's oracle logit is within tol of the oracle's best.
    Records (worst gap, token count) in row; returns an error message or None. The prompt's
    media (pixels, samples) fill its soft-token runs; generated tokens are plain text, decoded
    causally."""
    tol = GREEDY_TOL[precision]
    if len(generated) > NEW_TOKENS:
        return f"generate {precision}: {len(generated)} ids for --max-new-tokens {NEW_TOKENS}"
    if any(not 0 <= t < ckpt.config.vocab for t in generated):
        return f"generate {precision}: ids outside the vocabulary: {generated}"
    seq = list(prompt) + list(generated)
    h, spans = oracle.embed_inputs(ckpt, prompt, images=images, audios=audios)
    if generated:
        h = np.concatenate([h, oracle.embed_text(ckpt, generated)])
    # ref[k]: the oracle's logits at position len(prompt) - 1 + k, which predict generated[k];
    # ref[-1] predicts the token after the last one.
    ref = oracle.forward_embedded(ckpt, h, spans.image, logit_rows=np.arange(len(prompt) - 1, len(seq)))
    gaps = [float(ref[k].max() - ref[k, tok]) for k, tok in enumerate(generated)]
    row[f"greedy_{precision}"] = (max(gaps, default=0.0), len(generated))
    for k, (tok, gap) in enumerate(zip(generated, gaps)):
        if gap > tol:
            r = ref[k]
            return (f"generate {precision}: step {k} (position {len(prompt) + k}) chose {tok} with oracle logit "
                    f"{r[tok]:.4f}; oracle best {int(np.argmax(r))} at {r.max():.4f} (gap {gap:.4g} > {tol}); "
                    f"generated {generated}")
    if len(generated) < NEW_TOKENS and (not generated or generated[-1] not in STOP_IDS):
        # Stopped early without printing a stop id: a stop id must have been a valid greedy pick.
        r = ref[-1]
        if not any(r.max() - r[s] <= tol for s in STOP_IDS if s < r.size):
            return (f"generate {precision}: stopped after {len(generated)} tokens but no stop id {STOP_IDS} "
                    f"is within {tol} of the oracle's best next token")
    return None


# ----------------------------------------------------------------------------------------------
# Quantization at load (engine/model/quantize.h): the oracle runs on the weights dequantized by the
# same rule, in float32 arithmetic as the engine quantizes, so q and s are the engine's to the bit.
# ----------------------------------------------------------------------------------------------

LAYER_PROJECTION = re.compile(r"layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj)\.weight$")
QUANT_GROUP = 32


def dequantized_int8(w):
    """q · s of a [out, in] matrix by the int8 rule: per row and group of 32 along in (the last one
    shorter), s = bf16(max|w| / 127), q = clamp(rint(w / s), -127, 127), a zero group s = q = 0."""
    rows, cols = w.shape
    kp = -(-cols // QUANT_GROUP) * QUANT_GROUP
    padded = np.zeros((rows, kp), np.float32)
    padded[:, :cols] = w.astype(np.float32)
    groups = padded.reshape(rows, kp // QUANT_GROUP, QUANT_GROUP)
    amax = np.abs(groups).max(axis=2)
    s = oracle.bf16_round(amax / np.float32(127)).astype(np.float32)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(s > 0, np.clip(np.rint(groups / s), -127, 127), 0).astype(np.float32)
    return (q.astype(np.float64) * s.astype(np.float64)).reshape(rows, kp)[:, :cols]


def dequantized_int4(w):
    """q · s by the int4 rule: per row and group of 32, m the value of largest magnitude (the first of
    them), s = bf16(m / -8), q = clamp(rint(w / s), -8, 7), a zero group s = q = 0."""
    rows, cols = w.shape
    kp = -(-cols // QUANT_GROUP) * QUANT_GROUP
    padded = np.zeros((rows, kp), np.float32)
    padded[:, :cols] = w.astype(np.float32)
    groups = padded.reshape(rows, kp // QUANT_GROUP, QUANT_GROUP)
    m = np.take_along_axis(groups, np.abs(groups).argmax(axis=2)[..., None], axis=2)
    s = oracle.bf16_round(m / np.float32(-8)).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(s != 0, np.clip(np.rint(groups / s), -8, 7), 0).astype(np.float32)
    return (q.astype(np.float64) * s.astype(np.float64)).reshape(rows, kp)[:, :cols]


QUANTIZERS = {"int8": dequantized_int8, "int4": dequantized_int4}


def quantized(ckpt, quantize, quantize_head="none"):
    """The checkpoint with its layer projections dequantized by `quantize`'s rule, and the embedding
    (tied head) by `quantize_head`'s."""
    def weight(name, w):
        if quantize != "none" and LAYER_PROJECTION.search(name):
            return QUANTIZERS[quantize](w)
        if quantize_head != "none" and name == "embed_tokens.weight":
            return QUANTIZERS[quantize_head](w)
        return w
    return with_weights(ckpt, weight)


def run_case(engine, case, work, row, log, quantize="none", checkpoint="none", quantize_head="none"):
    model_dir = os.path.join(work, case.name)
    shutil.rmtree(model_dir, ignore_errors=True)
    os.makedirs(model_dir)
    engine.make_checkpoint(model_dir, case)
    ckpt = oracle.load_checkpoint(model_dir)
    check_layout(ckpt, case)
    prompt = np.random.default_rng(case.seed).integers(3, case.vocab, size=case.prompt_len).tolist()
    if quantize != "none" or quantize_head != "none":
        as_stored = oracle.forward(ckpt, prompt)
        ckpt = quantized(ckpt, quantize, quantize_head)
    if checkpoint != "none" and quantize_head == "none":
        # The packed checkpoint against its bf16 twin (same seed): how far its weights are from those.
        # (With --quantize-head the embedding's quantization alone is what must show.)
        twin_dir = model_dir + "_bf16"
        shutil.rmtree(twin_dir, ignore_errors=True)
        os.makedirs(twin_dir)
        engine.make_checkpoint(twin_dir, case, quantization="none")
        as_stored = oracle.forward(oracle.load_checkpoint(twin_dir), prompt)
    ref = oracle.forward(ckpt, prompt)
    if quantize != "none" or checkpoint != "none" or quantize_head != "none":
        # How far the quantized weights move the logits from the stored ones: what the exact tier
        # tells apart from an engine that ignored --quantize (checked in main).
        row["quantization_moves"] = float(np.abs(ref - as_stored).max())

    # Controls first: they need no engine and show what the bounds below can detect.
    row["controls"] = {name: float(np.abs(bug - ref).max()) for name, bug in controls(ckpt, prompt)}
    emulated = np.abs(oracle.forward(ckpt, prompt, act=oracle.bf16_round) - ref).max(axis=1)
    row["emul_bf16"] = {"max": float(emulated.max()), "median": float(np.median(emulated))}
    if np.median(emulated) > BF16_MEDIAN or emulated.max() > BF16_MAX:
        raise CheckFailure(f"a bf16-rounded oracle is outside the bf16 bound on this checkpoint "
                           f"(median {np.median(emulated):.3g}, max {emulated.max():.3g}): checkpoint too chaotic")

    errors = []
    for precision in ("fp32", "bf16"):
        for what, check in (
                ("score", lambda: compare_score(
                    ref, engine.score(model_dir, prompt, precision,
                                      os.path.join(model_dir, f"logits_{precision}.npy")), precision, row)),
                ("greedy", lambda: check_greedy(
                    ckpt, prompt, engine.generate(model_dir, prompt, NEW_TOKENS, precision), precision, row))):
            try:
                error = check()
            except CheckFailure as e:
                error = f"{what} {precision}: {e}"
            if error:
                errors.append(error)
        stats, greedy = row.get(precision), row.get(f"greedy_{precision}")
        log(f"  {case.name} {precision}: "
            + (f"max {stats['max']:.3g} median {stats['median']:.3g}" if stats else "score -")
            + (f"; greedy {greedy[1]} tokens, worst gap {greedy[0]:.3g}" if greedy else "; greedy -"))
    if errors:
        raise CheckFailure("\n  ".join(errors))


# ----------------------------------------------------------------------------------------------
# Multimodal cases (MULTIMODAL.md): generated media files, prompts built around them, and the
# image/audio negative controls.
# ----------------------------------------------------------------------------------------------

IMAGE, AUDIO = oracle.IMAGE_TOKEN, oracle.AUDIO_TOKEN
BOI, EOI, BOA, EOA = oracle.BOI_TOKEN, oracle.EOI_TOKEN, oracle.BOA_TOKEN, oracle.EOA_TOKEN
BLOCK = 48
# bf16 changes its spacing at 2^-k: pixel levels 15/16, 31/32, 63/64, 127/128 straddle it, so a
# near-constant patch there would be as fragile in a correct bf16 engine as under a real bug.
# A few values in a thousand one level off is where LayerNorm eps 1e-5 vs 1e-6 shows most.
NEAR_CONSTANT = (  # (block x, block y, level, fraction of values one level off); fraction 0: exactly constant
    (1, 1, 200, 0.0), (5, 2, 12, 0.002), (9, 7, 230, 0.004), (12, 12, 100, 0.003), (3, 10, 60, 0.002),
    (14, 4, 180, 0.005), (7, 13, 40, 0.003), (0, 15, 245, 0.002), (15, 0, 90, 0.004), (2, 5, 24, 0.003),
    (10, 1, 140, 0.002), (6, 8, 170, 0.004), (13, 9, 50, 0.002), (4, 14, 220, 0.003), (11, 15, 80, 0.005),
    (8, 3, 110, 0.002), (15, 11, 250, 0.003))


def smooth_noisy_rgb(h, w, seed, noise=12.0, amplitude=70.0):
    """Gradients and sinusoids per channel plus Gaussian noise: every patch well textured."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.empty((h, w, 3))
    for c in range(3):
        fx, fy, ph = rng.uniform(40, 160), rng.uniform(40, 160), rng.uniform(0, 2 * math.pi)
        kx, ky = rng.uniform(0.1, 0.3), rng.uniform(0.1, 0.3)
        img[..., c] = (128 + amplitude * np.sin(xx / fx + ph) * np.cos(yy / fy)
                       + 0.3 * amplitude * np.sin(kx * xx + ky * yy)
                       + 40 * (xx / w - 0.5) * (c - 1) + 30 * (yy / h - 0.5))
    img += rng.normal(0.0, noise, img.shape)
    return np.clip(np.round(img), 0, 255)


def varied_rgb(h, w, seed):
    """smooth_noisy_rgb with near-constant 48×48 blocks (one exactly constant): where the
    LayerNorm variance is tiny, so eps and an inaccurate variance show."""
    img = smooth_noisy_rgb(h, w, seed)
    rng = np.random.default_rng(seed + 1)
    for bx, by, level, frac in NEAR_CONSTANT:
        if (by + 1) * BLOCK > h or (bx + 1) * BLOCK > w:
            continue
        blk = np.full((BLOCK, BLOCK, 3), float(level))
        off = rng.random(blk.shape) < frac
        blk[off] += rng.choice([-1.0, 1.0], size=int(off.sum()))
        img[by * BLOCK:(by + 1) * BLOCK, bx * BLOCK:(bx + 1) * BLOCK] = blk
    return img.astype(np.uint8)


def write_png(path, h, w, seed, rgba=False):
    from PIL import Image
    rgb = varied_rgb(h, w, seed)
    if rgba:   # alpha varies, so compositing instead of dropping it would change the pixels
        yy, xx = np.mgrid[0:h, 0:w]
        alpha = np.clip(255 * (0.15 + 0.85 * (xx + yy) / (h + w)), 0, 255).astype(np.uint8)
        Image.fromarray(np.dstack([rgb, alpha]), "RGBA").save(path)
    else:
        Image.fromarray(rgb, "RGB").save(path)


def write_jpeg(path, w, h, seed, orientation=None):
    """High contrast everywhere (no near-constant patch, so a resizer or decoder one level off
    moves little); 4:4:4 at quality 95 so decoders differ only by IDCT rounding."""
    from PIL import Image
    im = Image.fromarray(smooth_noisy_rgb(h, w, seed, noise=50.0, amplitude=100.0).astype(np.uint8), "RGB")
    kwargs = {"quality": 95, "subsampling": 0}
    if orientation is not None:
        exif = Image.Exif()
        exif[0x0112] = orientation
        kwargs["exif"] = exif.tobytes()
    im.save(path, "JPEG", **kwargs)


def audio_signal(n, seed, channels=1, quiet=True):
    """Harmonics with vibrato, an envelope and noise; with `quiet` a stretch at ~1e-3 (mean
    square near the rms eps) and an exactly silent one. [n, channels] in [-1, 1)."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) / oracle.AUDIO_RATE
    out = np.empty((n, channels))
    for c in range(channels):
        f0 = rng.uniform(110, 330)
        phase = 2 * math.pi * np.cumsum(f0 * (1 + 0.02 * np.sin(2 * math.pi * 5 * t))) / oracle.AUDIO_RATE
        x = sum(rng.uniform(0.1, 0.3) * np.sin(k * phase + rng.uniform(0, 6)) for k in range(1, 6))
        x = x * (0.4 + 0.6 * np.abs(np.sin(2 * math.pi * 1.3 * t + c))) + rng.normal(0, 0.02, n)
        if quiet and n > 32000:
            x[24000:28000] *= 1e-3 / np.sqrt(np.mean(x[24000:28000] ** 2))
            x[30000:32000] = 0.0
        out[:, c] = x
    return np.clip(out, -0.99, 0.99)


def write_wav_pcm16(path, n, seed, channels=1):
    pcm = np.round(audio_signal(n, seed, channels) * 32767).astype("<i2")
    with wave.open(path, "wb") as f:
        f.setnchannels(channels)
        f.setsampwidth(2)
        f.setframerate(oracle.AUDIO_RATE)
        f.writeframes(pcm.tobytes())


def write_wav_float32(path, n, seed, channels=2):
    """IEEE float WAV (format tag 3, 18-byte fmt chunk, a fact chunk): `wave` cannot write these."""
    data = audio_signal(n, seed, channels).astype("<f4").tobytes()
    rate, align = oracle.AUDIO_RATE, 4 * channels
    fmt = struct.pack("<HHIIHHH", 3, channels, rate, rate * align, align, 32, 0)
    fact = struct.pack("<I", n)
    body = (b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"fact" + struct.pack("<I", 4) + fact
            + b"data" + struct.pack("<I", len(data)) + data)
    with open(path, "wb") as f:
        f.write(b"RIFF" + struct.pack("<I", len(body)) + body)


# name -> writer(path). Sizes: a PNG at its own target size is not resized (exact comparison).
MEDIA_FILES = {
    "varied_768.png": lambda p: write_png(p, 768, 768, 11),                     # 16x16 = 256 tokens
    "portrait_672x864.png": lambda p: write_png(p, 864, 672, 12),               # 14x18 = 252 tokens
    "rgba_768.png": lambda p: write_png(p, 768, 768, 13, rgba=True),            # 256 tokens
    "resize_500x300.jpg": lambda p: write_jpeg(p, 500, 300, 14),                # -> 1008x576, 252 tokens
    "exif6_1200x900.jpg": lambda p: write_jpeg(p, 1200, 900, 15, orientation=6),  # shown 900x1200 -> 672x912, 266
    "pcm16_2500ms.wav": lambda p: write_wav_pcm16(p, 40000, 16),                # 63 tokens (last one padded)
    "f32_stereo_1300ms.wav": lambda p: write_wav_float32(p, 20800, 17, 2),      # 33 tokens
    "pcm16_stereo_1000ms.wav": lambda p: write_wav_pcm16(p, 16000, 18, 2),      # 25 tokens
}


@dataclasses.dataclass
class MediaPrompt:
    """segments: ("text", n) random ids, ("image", file) -> 255999, 258880 × N, 258882,
    ("audio", file) -> 256000, 258881 × T, 258883; the prompt starts with bos 2."""
    name: str
    segments: tuple
    precisions: tuple = ("fp32", "bf16")
    resized: bool = False       # engine-side resize/JPEG decode: RESIZED_* bounds, fp32 only
    controls: bool = True
    chunk_check: tuple = ()     # precisions at which --prefill-chunk 7 must be bit-identical
    greedy: bool = False


@dataclasses.dataclass
class MediaCase:
    case: Case                  # the checkpoint
    prompts: tuple


MM_CASES = [
    # Window 16 under a 256-token block; sliding and full layers; k_eq_v; GQA 2:1 / 4:1.
    MediaCase(
        Case("mm_h64_win16", layers=6, hidden=64, intermediate=128, heads=4, head_dim=16, kv_heads=2,
             global_head_dim=32, global_kv_heads=1, vocab=262144, window=16, full_period=3, k_eq_v=True,
             partial_rotary=0.25, seed=606, layer_types=("s", "s", "f", "s", "s", "f")),
        (
            # 4 text ids after bos: the block starts at 6, so chunk 7 would split it.
            MediaPrompt("image_png", (("text", 4), ("image", "varied_768.png"), ("text", 12)),
                        chunk_check=("fp32", "bf16"), greedy=True),
            MediaPrompt("image_resized_jpeg", (("text", 3), ("image", "resize_500x300.jpg"), ("text", 8)),
                        precisions=("fp32",), resized=True, controls=False),
            MediaPrompt("image_exif_jpeg", (("text", 3), ("image", "exif6_1200x900.jpg"), ("text", 8)),
                        precisions=("fp32",), resized=True, controls=False),
            MediaPrompt("audio_pcm16", (("text", 5), ("audio", "pcm16_2500ms.wav"), ("text", 10))),
            MediaPrompt("audio_f32_stereo", (("text", 3), ("audio", "f32_stereo_1300ms.wav"), ("text", 6))),
        )),
    # Two images and an audio in one prompt; full layers with v_proj take num_key_value_heads (2, GQA 4:1),
    # not the global count (1); window 24.
    MediaCase(
        Case("mm_h64_win24_vproj", layers=6, hidden=64, intermediate=128, heads=8, head_dim=8, kv_heads=2,
             global_head_dim=16, global_kv_heads=1, vocab=262144, window=24, full_period=3, k_eq_v=False,
             partial_rotary=0.5, seed=707, layer_types=("s", "f", "s", "s", "f", "s")),
        (
            MediaPrompt("two_images_audio",
                        (("text", 3), ("image", "portrait_672x864.png"), ("text", 5),
                         ("audio", "pcm16_stereo_1000ms.wav"), ("text", 4), ("image", "rgba_768.png"),
                         ("text", 6)),
                        chunk_check=("bf16",)),
        )),
]


@dataclasses.dataclass
class BuiltPrompt:
    ids: list
    image_files: list
    audio_files: list
    pixels: list
    samples: list
    placeholders: int


def build_prompt(prompt, media_dir, ckpt, seed):
    """ids and media for a MediaPrompt; the soft-token counts come from the oracle's preparation."""
    rng = np.random.default_rng(seed)
    mc = ckpt.media_config
    ids, image_files, audio_files, pixels, samples = [2], [], [], [], []
    for kind, what in prompt.segments:
        if kind == "text":
            ids += rng.integers(3, BOI, size=what).tolist()
        elif kind == "image":
            path = os.path.join(media_dir, what)
            px = oracle.prepare_image(path, mc.max_soft_tokens, mc.block)
            image_files.append(path)
            pixels.append(px)
            ids += [BOI] + [IMAGE] * oracle.image_soft_tokens(px, mc.block) + [EOI]
        elif kind == "audio":
            path = os.path.join(media_dir, what)
            s = oracle.load_audio(path)
            audio_files.append(path)
            samples.append(s)
            ids += [BOA] + [AUDIO] * oracle.audio_soft_tokens(s, mc.audio_frame) + [EOA]
        else:
            raise ValueError(kind)
    n_ph = sum(1 for t in ids if t in (IMAGE, AUDIO))
    return BuiltPrompt(ids, image_files, audio_files, pixels or None, samples or None, n_ph)


def media_forward(ckpt, ids, pixels, samples, rows=None, act=oracle.exact, transform=None):
    """oracle.forward through its parts, so a control can change the embedded prompt or the spans."""
    h, spans = oracle.embed_inputs(ckpt, ids, act, pixels, samples)
    image_spans = spans.image
    if transform is not None:
        h, image_spans = transform(ckpt, h, spans)
    return oracle.forward_embedded(ckpt, h, image_spans, act, rows)


def control_rows(n, spans):
    """Rows the controls are scored on (a control's max over them bounds its max over all rows
    from below): every text row, every 4th soft-token row and the last of each run."""
    keep = np.ones(n, bool)
    for start, end in tuple(spans.image) + tuple(spans.audio):
        keep[start:end] = False
        keep[start:end:4] = True
        keep[end - 1] = True
    return np.nonzero(keep)[0]


def with_media_config(ckpt, **changes):
    return dataclasses.replace(ckpt, media_config=dataclasses.replace(ckpt.media_config, **changes))


def with_media(ckpt, fn):
    return dataclasses.replace(ckpt, media={n: fn(n, w) for n, w in ckpt.media.items()})


def flatten_column_major(block):
    """(column, row, channel) instead of (row, column, channel)."""
    return block.transpose(1, 0, 2).reshape(-1)


_visible = oracle.visible


def visible_block_windowed(positions, kind, image_spans=()):
    """Later keys of q's image block obey the window too: |q - k| < window."""
    mask = _visible(positions, kind, image_spans)
    if kind.window is not None:
        mask &= np.abs(positions[:, None] - positions[None, :]) < kind.window
    return mask


def soft_tokens_scaled(ckpt, h, spans):
    h = h.copy()
    s = oracle.embedding_scale(ckpt.config)
    for start, end in tuple(spans.image) + tuple(spans.audio):
        h[start:end] *= s
    return h, spans.image


def audio_bidirectional(ckpt, h, spans):
    return h, tuple(sorted(tuple(spans.image) + tuple(spans.audio)))


def media_controls(ckpt, built, ref):
    """{name: max |Δlogit| over control_rows} of the oracle with one image/audio bug."""
    ids, pixels, samples = built.ids, built.pixels, built.samples
    _, spans = oracle.embed_inputs(ckpt, ids, oracle.exact, pixels, samples)
    rows = control_rows(len(ids), spans)
    base = ref[rows]

    def delta(c=ckpt, px=pixels, **kw):
        return float(row_max_abs(media_forward(c, ids, px, samples, rows, **kw), base).max())

    out = {}
    if pixels:
        out["image blocks causal"] = delta(with_kind(ckpt, SLIDING, image_blocks_bidirectional=False))
        out["image blocks on full"] = delta(with_kind(ckpt, FULL, image_blocks_bidirectional=True))
        with swapped(oracle, "visible", visible_block_windowed):
            out["block keys windowed"] = delta()
        out["LayerNorm eps 1e-6"] = delta(with_media_config(ckpt, layer_norm_eps=1e-6))
        with swapped(oracle, "flatten_block", flatten_column_major):
            out["patch (col,row,ch)"] = delta()
        pos = oracle.VISION + "pos_embedding"
        out["pos axes swapped"] = delta(with_media(ckpt, lambda n, w: w[:, ::-1] if n == pos else w))
    out["soft tokens x scale"] = delta(transform=soft_tokens_scaled)
    if samples:
        out["audio bidirectional"] = delta(transform=audio_bidirectional)
    return out


def resize_controls(ckpt, built, ref, prompt_name):
    """Preparation bugs the RESIZED bounds must still catch."""
    from PIL import Image, ImageOps
    mc = ckpt.media_config
    out = {}

    def prepared(path, exif=True, method="BICUBIC"):
        with Image.open(path) as im:
            im = ImageOps.exif_transpose(im) if exif else im.copy()
            im = im.convert("RGB")
            th, tw = oracle.target_size(im.height, im.width, mc.max_soft_tokens, mc.block)
            if (im.height, im.width) != (th, tw):
                im = im.resize((tw, th), getattr(getattr(Image, "Resampling", Image), method))
            return np.array(im, dtype=np.uint8)

    out["bilinear resize"] = float(row_max_abs(media_forward(
        ckpt, built.ids, [prepared(p, method="BILINEAR") for p in built.image_files], built.samples), ref).max())
    if "exif" in prompt_name:
        px = [prepared(p, exif=False) for p in built.image_files]
        if all(oracle.image_soft_tokens(a, mc.block) == oracle.image_soft_tokens(b, mc.block)
               for a, b in zip(px, built.pixels)):
            out["EXIF ignored"] = float(row_max_abs(media_forward(ckpt, built.ids, px, built.samples), ref).max())
    return out


def alpha_controls(ckpt, built, ref):
    """convert("RGB") drops alpha: compositing it over black instead must show."""
    from PIL import Image
    px = []
    changed = False
    for path, p in zip(built.image_files, built.pixels):
        with Image.open(path) as im:
            if im.mode == "RGBA":
                a = np.array(im, dtype=np.float64)
                px.append(np.round(a[..., :3] * a[..., 3:] / 255.0).astype(np.uint8))
                changed = True
            else:
                px.append(p)
    if not changed:
        return {}
    _, spans = oracle.embed_inputs(ckpt, built.ids, oracle.exact, built.pixels, built.samples)
    rows = control_rows(len(built.ids), spans)
    return {"alpha composited": float(row_max_abs(media_forward(ckpt, built.ids, px, built.samples, rows),
                                                  ref[rows]).max())}


def pixel_jitter(pixels, seed):
    """±1 level on every value (clipped): what an engine-side resize or JPEG decoder may differ by."""
    rng = np.random.default_rng(seed)
    out = []
    for p in pixels:
        j = p.astype(np.int64) + rng.choice([-1, 1], size=p.shape)
        out.append(np.clip(j, 0, 255).astype(np.uint8))
    return out


def check_media_layout(ckpt, case):
    problems = []
    mc = ckpt.media_config
    if not ckpt.media:
        problems.append("no image/audio tensors (model.vision_embedder.*, model.embed_vision.*, model.embed_audio.*)")
    want = {"block": 48, "posemb_size": 1120, "max_soft_tokens": 280, "audio_frame": 640,
            "image_token": IMAGE, "audio_token": AUDIO}
    for key, value in want.items():
        if getattr(mc, key) != value:
            problems.append(f"media config {key} {getattr(mc, key)} != {value}")
    if ckpt.config.vocab != 262144:
        problems.append(f"vocab {ckpt.config.vocab} != 262144")
    if problems:
        raise CheckFailure("checkpoint written by make-checkpoint does not match the case: " + "; ".join(problems))


def check_soft_token_scale(ckpt, built):
    """Soft tokens comparable to scaled text embeddings, or the media path would barely matter."""
    text_rms = float(np.sqrt(np.mean(oracle.embed_text(ckpt, [t for t in built.ids if t < BOI]) ** 2)))
    soft = [oracle.embed_image(ckpt, p) for p in built.pixels or []] + \
           [oracle.embed_audio(ckpt, s) for s in built.samples or []]
    for s in soft:
        r = float(np.sqrt(np.mean(s ** 2)))
        if not 0.25 * text_rms < r < 4.0 * text_rms:
            raise CheckFailure(f"soft-token RMS {r:.3g} vs scaled text embedding RMS {text_rms:.3g}: the "
                               f"checkpoint's image/audio tensors are not O(1)-scaled (np_checkpoint.media_init)")


def run_media_case(engine, mcase, work, rows, log):
    case = mcase.case
    model_dir = os.path.join(work, case.name)
    shutil.rmtree(model_dir, ignore_errors=True)
    os.makedirs(model_dir)
    failures = []

    def fail_all(message):
        for prompt in mcase.prompts:
            rows.append({"case": f"{case.name}/{prompt.name}", "error": message})
            failures.append(f"[{case.name}/{prompt.name}] {message}")

    try:
        engine.make_checkpoint(model_dir, case)
        ckpt = oracle.load_checkpoint(model_dir)
        check_layout(ckpt, case)
        check_media_layout(ckpt, case)
    except (CheckFailure, ValueError) as e:
        fail_all(str(e))
        return failures
    media_dir = os.path.join(model_dir, "media")
    os.makedirs(media_dir, exist_ok=True)
    for p, prompt in enumerate(mcase.prompts):
        row = {"case": f"{case.name}/{prompt.name}"}
        rows.append(row)
        try:
            run_media_prompt(engine, ckpt, model_dir, media_dir, prompt, case.seed + 17 * p, row, log)
        except (CheckFailure, ValueError) as e:
            row["error"] = str(e)
            failures.append(f"[{row['case']}] {e}")
            log(f"  {row['case']}: FAILED")
    return failures


def score_and_remove(engine, model_dir, ids, precision, out_path, images, audios, extra=()):
    """engine.score_raw, deleting the .npy afterwards: [n, 262144] float32 is 1 MiB per token."""
    try:
        return engine.score_raw(model_dir, ids, precision, out_path, images, audios, extra)
    finally:
        if os.path.exists(out_path):
            os.remove(out_path)


def run_media_prompt(engine, ckpt, model_dir, media_dir, prompt, seed, row, log):
    t0 = time.time()
    for kind, what in prompt.segments:
        if kind != "text" and not os.path.exists(os.path.join(media_dir, what)):
            MEDIA_FILES[what](os.path.join(media_dir, what))
    built = build_prompt(prompt, media_dir, ckpt, seed)
    row["tokens"] = len(built.ids)
    check_soft_token_scale(ckpt, built)
    ref = oracle.forward(ckpt, built.ids, images=built.pixels, audios=built.samples)

    # Controls first: they need no engine and show what the bounds below can detect.
    controls = {}
    if prompt.controls:
        controls.update(media_controls(ckpt, built, ref))
    if any(os.path.basename(f).startswith("rgba") for f in built.image_files):
        controls.update(alpha_controls(ckpt, built, ref))
    row["controls"] = controls

    if prompt.resized:
        # Held to RESIZED_*: ±1/255 must fit well inside, preparation bugs must not.
        jitter = row_max_abs(media_forward(ckpt, built.ids, pixel_jitter(built.pixels, seed), built.samples), ref)
        row["jitter"] = {"max": float(jitter.max()), "median": float(np.median(jitter))}
        if jitter.max() > RESIZED_MAX or np.median(jitter) > RESIZED_MEDIAN:
            raise CheckFailure(f"±1/255 pixel jitter moves the oracle by max {jitter.max():.3g} median "
                               f"{np.median(jitter):.3g}: the image is too sensitive for the resized bounds")
        row["resize_controls"] = resize_controls(ckpt, built, ref, prompt.name)
    if "bf16" in prompt.precisions:
        emulated = row_max_abs(oracle.forward(ckpt, built.ids, act=oracle.bf16_round, images=built.pixels,
                                              audios=built.samples), ref)
        row["emul_bf16"] = {"max": float(emulated.max()), "median": float(np.median(emulated))}
        if np.median(emulated) > BF16_MEDIAN or emulated.max() > BF16_MAX:
            raise CheckFailure(f"a bf16-rounded oracle is outside the bf16 bound on this prompt "
                               f"(median {np.median(emulated):.3g}, max {emulated.max():.3g})")

    errors = []
    images, audios = built.image_files, built.audio_files
    for precision in prompt.precisions:
        out_path = os.path.join(model_dir, f"logits_{prompt.name}_{precision}.npy")
        try:
            raw = score_and_remove(engine, model_dir, built.ids, precision, out_path, images, audios)
            bounds = (RESIZED_MEDIAN, RESIZED_MAX) if prompt.resized else None
            error = compare_score(ref, raw, precision, row, bounds)
            if prompt.resized and precision in row:
                row[precision]["exact"] = row[precision]["max"] <= FP32_MAX
        except CheckFailure as e:
            raw, error = None, f"score {precision}: {e}"
            if prompt.resized:
                error += (f"\n    (the oracle prepared the images as "
                          f"{[f'{p.shape[1]}x{p.shape[0]}' for p in built.pixels]} and ids with that many "
                          f"258880: a different size on the engine's side shows as a run-length error)")
        if error:
            errors.append(error)
        if precision in prompt.chunk_check and raw is not None:
            try:
                chunked = score_and_remove(engine, model_dir, built.ids, precision, out_path + ".chunk7.npy",
                                           images, audios, extra=["--prefill-chunk", "7"])
                same = chunked.shape == raw.shape and chunked.dtype == raw.dtype and np.array_equal(
                    chunked.view(np.uint8), raw.view(np.uint8))
                row[f"chunk_{precision}"] = same
                if not same:
                    if chunked.shape != raw.shape or chunked.dtype != raw.dtype:
                        where = f": {chunked.dtype}{list(chunked.shape)} vs {raw.dtype}{list(raw.shape)}"
                    else:
                        differ = np.nonzero((chunked.view(np.uint8) != raw.view(np.uint8)).any(axis=1))[0]
                        where = (f": max |Δ| {row_max_abs(chunked.astype(np.float64), raw).max():.3g}, "
                                 f"{differ.size} positions differ, the first at {differ[0]}")
                    errors.append(f"score {precision} --prefill-chunk 7 is not bit-identical to the default{where}")
            except CheckFailure as e:
                errors.append(f"score {precision} --prefill-chunk 7: {e}")
        del raw
        if prompt.greedy:
            try:
                generated = engine.generate(model_dir, built.ids, NEW_TOKENS, precision, images, audios)
                error = check_greedy(ckpt, built.ids, generated, precision, row, built.pixels, built.samples)
            except CheckFailure as e:
                error = f"greedy {precision}: {e}"
            if error:
                errors.append(error)
        stats, greedy = row.get(precision), row.get(f"greedy_{precision}")
        log(f"  {row['case']} {precision}: "
            + (f"max {stats['max']:.3g} median {stats['median']:.3g}" if stats else "score -")
            + (f"; chunk 7 identical: {row[f'chunk_{precision}']}" if f"chunk_{precision}" in row else "")
            + (f"; greedy {greedy[1]} tokens, worst gap {greedy[0]:.3g}" if greedy else ""))
    row["seconds"] = time.time() - t0
    if errors:
        raise CheckFailure("\n  ".join(errors))


def print_media_table(rows):
    head = (f"{'prompt':<38} {'tokens':>6} {'fp32 max':>9} {'fp32 med':>9} {'bf16 max':>9} {'bf16 med':>9} "
            f"{'emul bf16 max/med':>17} {'jitter max':>10} {'chunk7':>6} {'greedy fp32':>11} {'bf16':>6} {'s':>5}")
    print(head)
    print("-" * len(head))
    for r in rows:
        cells = [f"{r['case']:<38}", f"{r.get('tokens', '-'):>6}"]
        for p in ("fp32", "bf16"):
            cells.append(f"{r[p]['max']:>9.2e} {r[p]['median']:>9.2e}" if p in r else f"{'-':>9} {'-':>9}")
        e = r.get("emul_bf16")
        cells.append(f"{e['max']:>8.3f}/{e['median']:<8.3f}" if e else f"{'-':>17}")
        j = r.get("jitter")
        cells.append(f"{j['max']:>10.3f}" if j else f"{'-':>10}")
        chunks = [r[k] for k in ("chunk_fp32", "chunk_bf16") if k in r]
        cells.append(f"{('ok' if all(chunks) else 'DIFF') if chunks else '-':>6}")
        g32, g16 = r.get("greedy_fp32"), r.get("greedy_bf16")
        cells.append(f"{g32[0]:>11.2e}" if g32 else f"{'-':>11}")
        cells.append(f"{g16[0]:>6.3f}" if g16 else f"{'-':>6}")
        cells.append(f"{r['seconds']:>5.0f}" if "seconds" in r else f"{'-':>5}")
        print(" ".join(cells) + ("  FAILED" if "error" in r else ""))
    resized = [r for r in rows if r.get("fp32", {}).get("exact") is not None]
    for r in resized:
        print(f"  {r['case']}: engine-side preparation {'matches Pillow (fp32 max within ' + str(FP32_MAX) + ')' if r['fp32']['exact'] else 'differs from Pillow within the resized bounds'}")


def print_table(rows):
    head = (f"{'case':<20} {'fp32 max':>9} {'fp32 med':>9} {'bf16 max':>9} {'bf16 med':>9} "
            f"{'emul bf16 max/med':>17} {'greedy gap fp32':>15} {'bf16':>6} {'(tokens)':>8}")
    print(head)
    print("-" * len(head))
    for r in rows:
        cells = [f"{r['case']:<20}"]
        for p in ("fp32", "bf16"):
            if p in r:
                cells.append(f"{r[p]['max']:>9.2e} {r[p]['median']:>9.2e}" if p == "fp32"
                             else f"{r[p]['max']:>9.3f} {r[p]['median']:>9.3f}")
            else:
                cells.append(f"{'-':>9} {'-':>9}")
        e = r.get("emul_bf16")
        cells.append(f"{e['max']:>8.3f}/{e['median']:<8.3f}" if e else f"{'-':>17}")
        g32, g16 = r.get("greedy_fp32"), r.get("greedy_bf16")
        cells.append(f"{g32[0]:>15.2e}" if g32 else f"{'-':>15}")
        cells.append(f"{g16[0]:>6.3f}" if g16 else f"{'-':>6}")
        cells.append(f"{'(%s,%s)' % (g32[1] if g32 else '-', g16[1] if g16 else '-'):>8}")
        print(" ".join(cells) + ("  FAILED" if "error" in r else ""))


def check_controls(rows, all_cases, key="controls", minimum=CONTROL_MIN, label=lambda c: c[:16]):
    """Each control must move logits by more than `minimum` on at least one checkpoint."""
    names = []
    for r in rows:
        names += [n for n in r.get(key, {}) if n not in names]
    if not names:
        return []
    print(f"\nnegative controls: max |Δlogit| of the oracle with a known bug (must exceed {minimum} somewhere)")
    print(f"{'control':<24}" + "".join(f" {label(r['case']):>16}" for r in rows))
    missed = []
    for n in names:
        values = [r.get(key, {}).get(n) for r in rows]
        print(f"{n:<24}" + "".join(f" {v:>16.3f}" if v is not None else f" {'n/a':>16}" for v in values))
        if max(v for v in values if v is not None) <= minimum:
            missed.append(n)
    if not all_cases:
        return []
    return [f"[controls] '{n}' moved logits by at most {minimum} on every checkpoint: "
            f"the suite could not detect that bug" for n in missed]


def select(spec, skip_multimodal):
    """(text cases, multimodal cases) named by --cases: '' or 'text' (the text group, the default),
    'multimodal', 'all', or comma-separated case names of either group."""
    text, media = [], []
    for item in [s for s in spec.split(",") if s.strip()] or ["text"]:
        item = item.strip()
        if item in ("text", "all"):
            text += [c for c in CASES if c not in text]
        if item in ("multimodal", "all"):
            media += [m for m in MM_CASES if m not in media]
        if item in ("text", "multimodal", "all"):
            continue
        found = [c for c in CASES if c.name == item]
        found_mm = [m for m in MM_CASES if m.case.name == item]
        if not found and not found_mm:
            raise SystemExit(f"FAIL: no case matches {item}; known: {[c.name for c in CASES]}, "
                             f"{[m.case.name for m in MM_CASES]} and the groups text, multimodal, all")
        text += [c for c in found if c not in text]
        media += [m for m in found_mm if m not in media]
    if skip_multimodal:
        media = []
    return text, media


SKIP_CODE = 77  # ctest's SKIP_RETURN_CODE in tests/oracle/tests.cmake


def check_kernel(lines, expected):
    """The kernel the engine said it ran (one line per process) against --expect-kernel: failures, and
    whether the engine said it set the request aside because this CPU lacks that kernel (a skip)."""
    print(f"\nCPU stages said: {sorted(lines) or 'nothing'}")
    if {line.split()[2] for line in lines} == {expected}:
        return [], False
    if any("ignored: this CPU lacks" in line for line in lines):
        return [], True
    return [f"expected every CPU stage to run the {expected} matmul kernel, they said {sorted(lines) or 'nothing'}"], False


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", default=os.environ.get("LAYERPIPE_BIN"), help="directory holding `layerpipe`")
    parser.add_argument("--work", default="/tmp/layerpipe_oracle_check", help="scratch directory for checkpoints")
    parser.add_argument("--emulate", action="store_true", help="use the rounded oracle instead of the engine")
    parser.add_argument("--cases", default="",
                        help="comma-separated case names or groups: text (default), multimodal, all")
    parser.add_argument("--skip-multimodal", action="store_true", help="drop the multimodal cases from the selection")
    parser.add_argument("--timeout", type=int, default=120, help="seconds per engine command")
    parser.add_argument("--device", default="cpu", help="where `layerpipe` runs the layers: cpu, cuda, cuda:N")
    parser.add_argument("--quantize", default="none", choices=["none", *QUANTIZERS],
                        help="run `layerpipe --quantize` and hold it to the oracle on the same dequantized weights")
    parser.add_argument("--quantize-head", default="none", choices=["none", "int8"],
                        help="run `layerpipe --quantize-head` and hold it to the oracle on the dequantized embedding")
    parser.add_argument("--checkpoint", default="none", choices=["none", "w4a16"],
                        help="write the checkpoints packed (`make-checkpoint --quantization`) and hold the engine to "
                             "the oracle on the weights they ship")
    parser.add_argument("--expect-kernel", default="",
                        help="require every CPU stage to say it ran this matmul kernel (avx2, avx512f, avx512bf16); "
                             f"exit {SKIP_CODE} (skipped) where it says this CPU lacks it")
    args = parser.parse_args()

    if args.emulate:
        engine = EmulatedEngine()
    elif not args.bin:
        raise SystemExit("FAIL: no engine: pass --bin DIR or set LAYERPIPE_BIN (or --emulate)")
    else:
        engine = CliEngine(args.bin, args.timeout, args.device, args.quantize, args.quantize_head)
        engine.checkpoint = args.checkpoint
    cases, media_cases = select(args.cases, args.skip_multimodal)
    if not cases and not media_cases:
        raise SystemExit("FAIL: nothing selected")
    os.makedirs(args.work, exist_ok=True)

    rows, media_rows, failures = [], [], []
    start = time.time()
    for case in cases:
        row = {"case": case.name}
        rows.append(row)
        try:
            run_case(engine, case, args.work, row, print, args.quantize, args.checkpoint, args.quantize_head)
        except (CheckFailure, ValueError) as e:     # ValueError: the oracle refused the checkpoint
            row["error"] = str(e)
            failures.append(f"[{case.name}] {e}")
            print(f"  {case.name}: FAILED")
    text_seconds = time.time() - start
    for mcase in media_cases:
        failures += run_media_case(engine, mcase, args.work, media_rows, print)
    if cases:
        print()
        print(f"bounds: fp32 max {FP32_MAX}; bf16 median {BF16_MEDIAN} and max {BF16_MAX} of the per-position "
              f"max |Δlogit|; greedy gap fp32 {GREEDY_TOL['fp32']}, bf16 {GREEDY_TOL['bf16']}  ({text_seconds:.1f}s)")
        print_table(rows)
        failures += check_controls(rows, all_cases=len(cases) == len(CASES))
        flags = [f"--{k} {v}" for k, v in (("quantize", args.quantize), ("quantize-head", args.quantize_head),
                                            ("checkpoint", args.checkpoint)) if v != "none"]
        if flags:
            what = " ".join(flags)
            moves = [r["quantization_moves"] for r in rows if "quantization_moves" in r]
            print(f"{what}: the dequantized weights move the oracle's logits by up to "
                  + ", ".join(f"{m:.3g}" for m in moves))
            if moves and max(moves) <= FP32_MAX:
                failures.append(f"{what}: no checkpoint's logits move past the fp32 bound "
                                f"{FP32_MAX}, so the check could not tell the quantized weights from the stored ones")
    if media_cases:
        print()
        print(f"multimodal: as above; images the engine resizes or decodes from JPEG: fp32 median "
              f"{RESIZED_MEDIAN}, max {RESIZED_MAX}  ({time.time() - start - text_seconds:.1f}s)")
        print_media_table(media_rows)
        short = lambda c: c.split("/", 1)[-1][:16]  # noqa: E731
        failures += check_controls(media_rows, all_cases=len(media_cases) == len(MM_CASES), label=short)
        failures += check_controls(media_rows, all_cases=len(media_cases) == len(MM_CASES), key="resize_controls",
                                   minimum=RESIZED_MAX, label=short)
    skip = False
    if args.expect_kernel and isinstance(engine, CliEngine):
        kernel_failures, skip = check_kernel(engine.kernel_lines, args.expect_kernel)
        failures += kernel_failures
    if skip and not failures:
        print(f"SKIP: this CPU cannot run the {args.expect_kernel} kernel (the default run covers the one it ran)")
        sys.exit(SKIP_CODE)
    if failures:
        print("\nFAILURES:")
        for f in failures:
            print(f)
        sys.exit(1)
    what = [f"{len(cases)} checkpoints"] if cases else []
    if media_cases:
        what.append(f"{len(media_rows)} multimodal prompts on {len(media_cases)} checkpoints")
    print(f"\nOK: {' and '.join(what)} agree with the oracle")


if __name__ == "__main__":
    main()
