#!/usr/bin/python3
"""Holds the C++ engine to the float64 oracle (MODEL.md §5).

For each case: `layerpipe make-checkpoint` writes a random checkpoint, a seeded 40-token prompt
runs through the oracle and through `layerpipe score` (fp32 and bf16), and `layerpipe generate`
(greedy, 32 tokens) is checked teacher-forced against the oracle. On every checkpoint, negative
controls show that the oracle with a known bug moves logits by more than the bf16 bound, and an
activation-rounded oracle shows a correct lower-precision engine fits inside it.

    check_engine.py --bin build/bin --work /tmp/oracle_work      # against the engine
    check_engine.py --emulate --work /tmp/oracle_work            # driver dry run, no engine
"""

import argparse
import contextlib
import dataclasses
import os
import shutil
import subprocess
import sys
import time

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
    # GQA 2:1 sliding and 16:1 full, full layers with v_proj, partial rotary 0.5, 3 shards, hidden 160.
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

    def __init__(self, bin_dir, timeout, device="cpu"):
        self.exe = os.path.join(bin_dir, "layerpipe")
        self.timeout = timeout
        self.device = device
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
        return done.stdout

    def make_checkpoint(self, out_dir, case):
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
        self._run([str(a) for a in args])

    def score(self, model_dir, ids, precision, out_path):
        self._run(["score", "--model", model_dir, "--ids", ",".join(map(str, ids)),
                   "--logits-out", out_path, "--precision", precision, "--device", self.device])
        return np.load(out_path).astype(np.float64)

    def generate(self, model_dir, ids, n, precision):
        out = self._run(["generate", "--model", model_dir, "--ids", ",".join(map(str, ids)),
                         "--max-new-tokens", str(n), "--print-ids", "--precision", precision,
                         "--device", self.device])
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
    oracle with every activation rounded to the requested precision."""

    def make_checkpoint(self, out_dir, case):
        spec = np_checkpoint.Spec(
            layers=case.layers, hidden=case.hidden, intermediate=case.intermediate, heads=case.heads,
            head_dim=case.head_dim, kv_heads=case.kv_heads, global_head_dim=case.global_head_dim,
            global_kv_heads=case.global_kv_heads, vocab=case.vocab, window=case.window,
            layer_types=case.types(), k_eq_v=case.k_eq_v, partial_rotary=case.partial_rotary,
            seed=case.seed, shards=case.shards, flat_config=case.flat_config)
        np_checkpoint.write_checkpoint(out_dir, spec)

    def score(self, model_dir, ids, precision, out_path):
        return oracle.forward(oracle.load_checkpoint(model_dir), ids, act=ROUNDING[precision])

    def generate(self, model_dir, ids, n, precision):
        ckpt, seq, out = oracle.load_checkpoint(model_dir), list(ids), []
        for _ in range(n):
            nxt = int(np.argmax(oracle.forward(ckpt, seq, act=ROUNDING[precision])[-1]))
            out.append(nxt)
            seq.append(nxt)
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
    return oracle.Checkpoint(ckpt.config, {n: fn(n, w) for n, w in ckpt.weights.items()})


def with_kind(ckpt, layer_type, **changes):
    kinds = dict(ckpt.config.kinds)
    kinds[layer_type] = dataclasses.replace(kinds[layer_type], **changes)
    return oracle.Checkpoint(dataclasses.replace(ckpt.config, kinds=kinds), ckpt.weights)


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
    for t, hd, kv in ((SLIDING, case.head_dim, case.kv_heads), (FULL, case.global_head_dim, case.global_kv_heads)):
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


def compare_score(ref, got, precision, row):
    """Records per-position stats in row[precision]; returns an error message or None."""
    if got.shape != ref.shape:
        return f"score {precision}: logits shape {got.shape}, expected {ref.shape}"
    if not np.all(np.isfinite(got)):
        bad = sorted(set(np.nonzero(~np.isfinite(got))[0].tolist()))
        return f"score {precision}: non-finite logits at positions {bad[:10]}"
    per_pos = np.abs(got - ref).max(axis=1)
    worst = int(np.argmax(per_pos))
    row[precision] = {"max": float(per_pos.max()), "median": float(np.median(per_pos))}
    if precision == "fp32":
        bound, ok = f"max {FP32_MAX}", per_pos.max() <= FP32_MAX
        first_bad = np.nonzero(per_pos > FP32_MAX)[0]
    else:
        bound = f"median {BF16_MEDIAN}, max {BF16_MAX}"
        ok = np.median(per_pos) <= BF16_MEDIAN and per_pos.max() <= BF16_MAX
        first_bad = np.nonzero(per_pos > BF16_MAX)[0]
    if ok:
        return None
    first = f"first position over {BF16_MAX if precision == 'bf16' else FP32_MAX}: " + (
        f"{first_bad[0]}" if first_bad.size else "none")
    return (f"score {precision}: max |Δlogit| {per_pos.max():.4g} at position {worst} (engine argmax "
            f"{int(np.argmax(got[worst]))}, oracle {int(np.argmax(ref[worst]))}), median {np.median(per_pos):.4g}; "
            f"bound {bound}; {first}\n    per-position max |Δ|: " + " ".join(f"{d:.3g}" for d in per_pos))


def check_greedy(ckpt, prompt, generated, precision, row):
    """Teacher-forced: each generated token's oracle logit is within tol of the oracle's best.
    Records (worst gap, token count) in row; returns an error message or None."""
    tol = GREEDY_TOL[precision]
    if len(generated) > NEW_TOKENS:
        return f"generate {precision}: {len(generated)} ids for --max-new-tokens {NEW_TOKENS}"
    if any(not 0 <= t < ckpt.config.vocab for t in generated):
        return f"generate {precision}: ids outside the vocabulary: {generated}"
    seq = list(prompt) + list(generated)
    ref = oracle.forward(ckpt, seq)
    gaps = [float(ref[len(prompt) - 1 + k].max() - ref[len(prompt) - 1 + k, tok]) for k, tok in enumerate(generated)]
    row[f"greedy_{precision}"] = (max(gaps, default=0.0), len(generated))
    for k, (tok, gap) in enumerate(zip(generated, gaps)):
        if gap > tol:
            r = ref[len(prompt) - 1 + k]
            return (f"generate {precision}: step {k} (position {len(prompt) + k}) chose {tok} with oracle logit "
                    f"{r[tok]:.4f}; oracle best {int(np.argmax(r))} at {r.max():.4f} (gap {gap:.4g} > {tol}); "
                    f"generated {generated}")
    if len(generated) < NEW_TOKENS and (not generated or generated[-1] not in STOP_IDS):
        # Stopped early without printing a stop id: a stop id must have been a valid greedy pick.
        r = ref[len(seq) - 1]
        if not any(r.max() - r[s] <= tol for s in STOP_IDS if s < r.size):
            return (f"generate {precision}: stopped after {len(generated)} tokens but no stop id {STOP_IDS} "
                    f"is within {tol} of the oracle's best next token")
    return None


def run_case(engine, case, work, row, log):
    model_dir = os.path.join(work, case.name)
    shutil.rmtree(model_dir, ignore_errors=True)
    os.makedirs(model_dir)
    engine.make_checkpoint(model_dir, case)
    ckpt = oracle.load_checkpoint(model_dir)
    check_layout(ckpt, case)
    prompt = np.random.default_rng(case.seed).integers(3, case.vocab, size=case.prompt_len).tolist()
    ref = oracle.forward(ckpt, prompt)

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


def check_controls(rows, all_cases):
    """Each control must move logits by more than CONTROL_MIN on at least one checkpoint."""
    names = []
    for r in rows:
        names += [n for n in r.get("controls", {}) if n not in names]
    print(f"\nnegative controls: max |Δlogit| of the oracle with a known bug (must exceed {CONTROL_MIN} somewhere)")
    print(f"{'control':<24}" + "".join(f" {r['case'][:16]:>16}" for r in rows))
    missed = []
    for n in names:
        values = [r.get("controls", {}).get(n) for r in rows]
        print(f"{n:<24}" + "".join(f" {v:>16.3f}" if v is not None else f" {'n/a':>16}" for v in values))
        if max(v for v in values if v is not None) <= CONTROL_MIN:
            missed.append(n)
    if not all_cases:
        return []
    return [f"[controls] '{n}' moved logits by at most {CONTROL_MIN} on every checkpoint: "
            f"the suite could not detect that bug" for n in missed]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", default=os.environ.get("LAYERPIPE_BIN"), help="directory holding `layerpipe`")
    parser.add_argument("--work", default="/tmp/layerpipe_oracle_check", help="scratch directory for checkpoints")
    parser.add_argument("--emulate", action="store_true", help="use the rounded oracle instead of the engine")
    parser.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    parser.add_argument("--timeout", type=int, default=120, help="seconds per engine command")
    parser.add_argument("--device", default="cpu", help="where `layerpipe` runs the layers: cpu, cuda, cuda:N")
    args = parser.parse_args()

    if args.emulate:
        engine = EmulatedEngine()
    elif not args.bin:
        raise SystemExit("FAIL: no engine: pass --bin DIR or set LAYERPIPE_BIN (or --emulate)")
    else:
        engine = CliEngine(args.bin, args.timeout, args.device)
    cases = [c for c in CASES if not args.cases or c.name in args.cases.split(",")]
    if not cases:
        raise SystemExit(f"FAIL: no case matches {args.cases}; known: {[c.name for c in CASES]}")
    os.makedirs(args.work, exist_ok=True)

    rows, failures = [], []
    start = time.time()
    for case in cases:
        row = {"case": case.name}
        rows.append(row)
        try:
            run_case(engine, case, args.work, row, print)
        except CheckFailure as e:
            row["error"] = str(e)
            failures.append(f"[{case.name}] {e}")
            print(f"  {case.name}: FAILED")
    print()
    print(f"bounds: fp32 max {FP32_MAX}; bf16 median {BF16_MEDIAN} and max {BF16_MAX} of the per-position "
          f"max |Δlogit|; greedy gap fp32 {GREEDY_TOL['fp32']}, bf16 {GREEDY_TOL['bf16']}  ({time.time() - start:.1f}s)")
    print_table(rows)
    failures += check_controls(rows, all_cases=len(cases) == len(CASES))
    if failures:
        print("\nFAILURES:")
        for f in failures:
            print(f)
        sys.exit(1)
    print(f"\nOK: {len(cases)} checkpoints agree with the oracle")


if __name__ == "__main__":
    main()
