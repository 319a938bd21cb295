#!/usr/bin/env python3
"""Memory a layerpipe worker needs for Gemma 4 12B: mapped weights by layers held, KV cache by context.

Prints the sizing tables of docs/deploy.md (between its `sizing:begin` and `sizing:end` markers); with
--check FILE, exits 1 unless FILE holds exactly these tables. The shapes are those of
shared/docs/MODEL.md; the KV rules mirror engine/model/kv_layout.h (a sliding layer allocates its whole window
ring at a sequence's first token, a full layer grows by pages of 256 positions, each position one joined row
of K and V) and the default split is a
port of coordinator/scheduling/planner.cc's PlanLayerRanges.
"""
import argparse
import math
import sys

# Gemma 4 12B text stack (MODEL.md, text_config).
HIDDEN = 3840
INTERMEDIATE = 15360
VOCAB = 262144
HEADS = 16
SLIDING_HEAD_DIM, SLIDING_KV_HEADS = 256, 8
FULL_HEAD_DIM, FULL_KV_HEADS = 512, 1
FULL_ROTARY_PAIRS = 64  # partial_rotary_factor 0.25 of 512 / 2: the dims K does not share with V (k_eq_v)
WINDOW = 1024
LAYER_TYPES = (["sliding"] * 5 + ["full"]) * 8
BF16 = 2
KV_PAGE_TOKENS = 256  # LayerKvCache::kPageTokens
GIB = 1 << 30
MIB = 1 << 20

CONTEXTS = (4096, 32768, 131072, 262144)


# Bytes of a [rows, cols] matrix by weight format: engine/model/weight_matrix.cc's format table.
def packed_bytes(bits):
    """Quantized values of `bits` in groups of 16 rows, k padded to the group of 32, and a bf16 scale per row
    and group (engine/model/weight_matrix.h: PackedTiled)."""
    def size(rows, cols):
        rows_padded, k_padded = -(-rows // 16) * 16, -(-cols // QUANT_GROUP) * QUANT_GROUP
        return rows_padded * k_padded * bits // 8 + rows_padded * (k_padded // QUANT_GROUP) * BF16
    return size


QUANT_GROUP = 32
WEIGHT_FORMATS = {
    "bf16": lambda rows, cols: rows * cols * BF16,
    "int8": packed_bytes(8),
    "int4": packed_bytes(4),
}
QUANTIZE = (("none", "bf16"), ("int8", "int8"), ("int4", "int4"))  # --quantize value, the decoder matrices' format


def layer_matrices(kind):
    """[rows, cols] of one decoder layer's projections (MODEL.md's tensor list, k_eq_v: full layers have
    no v_proj)."""
    head_dim, kv_heads = (SLIDING_HEAD_DIM, SLIDING_KV_HEADS) if kind == "sliding" else (FULL_HEAD_DIM, FULL_KV_HEADS)
    mats = [(HEADS * head_dim, HIDDEN), (kv_heads * head_dim, HIDDEN)]  # q, k
    if kind == "sliding":
        mats.append((kv_heads * head_dim, HIDDEN))  # v
    mats += [(HIDDEN, HEADS * head_dim), (INTERMEDIATE, HIDDEN), (INTERMEDIATE, HIDDEN), (HIDDEN, INTERMEDIATE)]
    return mats


def layer_bytes(kind, fmt="bf16"):
    """A decoder layer's matrices in `fmt`, and its norm gains as stored (bf16): 4 layer norms, q_norm
    and k_norm, layer_scalar."""
    head_dim = SLIDING_HEAD_DIM if kind == "sliding" else FULL_HEAD_DIM
    norms = 4 * HIDDEN + 2 * head_dim + 1
    return sum(WEIGHT_FORMATS[fmt](r, c) for r, c in layer_matrices(kind)) + norms * BF16


LAYER_BYTES = {kind: layer_bytes(kind) for kind in ("sliding", "full")}
EMBED_BYTES = WEIGHT_FORMATS["bf16"](VOCAB, HIDDEN)  # embed_tokens: the first stage's lookup and, tied, the last stage's head
FINAL_NORM_BYTES = HIDDEN * BF16


def weight_bytes(begin, end, first, last):
    """Bytes a worker maps for layers [begin, end): the embedding once even when it is both first and last."""
    total = sum(LAYER_BYTES[LAYER_TYPES[l]] for l in range(begin, end))
    if first or last:
        total += EMBED_BYTES
    if last:
        total += FINAL_NORM_BYTES
    return total


def kv_bytes(begin, end, tokens, bytes_per_value=BF16):
    """KV cache of one sequence of `tokens` positions over layers [begin, end): a sliding layer's K and V
    rows; a full layer's joined rows (engine/model/joined_kv.h), its 512 V values and K's 128 rotated ones."""
    total = 0
    for l in range(begin, end):
        if LAYER_TYPES[l] == "sliding":
            rows, values = WINDOW, 2 * SLIDING_KV_HEADS * SLIDING_HEAD_DIM
        else:
            rows = math.ceil(tokens / KV_PAGE_TOKENS) * KV_PAGE_TOKENS
            values = FULL_KV_HEADS * (FULL_HEAD_DIM + 2 * FULL_ROTARY_PAIRS)
        total += rows * values * bytes_per_value
    return total


def plan_layer_ranges(workers):
    """coordinator/scheduling/planner.cc PlanLayerRanges for the 12B: contiguous ranges minimising the largest cost."""
    n = len(LAYER_TYPES)
    workers = max(1, min(workers, n))

    def cost_of(kind):
        head_dim, kv_heads = (SLIDING_HEAD_DIM, SLIDING_KV_HEADS) if kind == "sliding" else (FULL_HEAD_DIM, FULL_KV_HEADS)
        attn = float(HIDDEN) * (HEADS * head_dim * 2 + kv_heads * head_dim * (2 if kind == "sliding" else 1))
        return attn + 3.0 * HIDDEN * float(INTERMEDIATE)

    prefix = [0.0]
    for kind in LAYER_TYPES:
        prefix.append(prefix[-1] + cost_of(kind))
    head = float(VOCAB) * float(HIDDEN)
    embed = 0.05 * head

    def cost(b, e, stage):
        return prefix[e] - prefix[b] + (embed if stage == 0 else 0.0) + (head if stage == workers - 1 else 0.0)

    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(workers)]
    cut = [[0] * (n + 1) for _ in range(workers)]
    for e in range(1, n + 1):
        best[0][e] = cost(0, e, 0)
    for s in range(1, workers):
        for e in range(s + 1, n + 1):
            for b in range(s, e):
                v = max(best[s - 1][b], cost(b, e, s))
                if v < best[s][e]:
                    best[s][e] = v
                    cut[s][e] = b
    ranges = [None] * workers
    e = n
    for s in range(workers - 1, -1, -1):
        b = 0 if s == 0 else cut[s][e]
        ranges[s] = (b, e)
        e = b
    return ranges


def gib(x):
    return f"{x / GIB:.2f}"


def mib(x):
    return f"{x / MIB:,.0f}"


def context_label(tokens):
    return f"{tokens // 1024}K"


def tables():
    kv_header = " | ".join(f"KV/seq {context_label(c)}" for c in CONTEXTS)
    kv_rule = "---:|" * len(CONTEXTS)
    lines = [
        "Weights (GiB = 2^30 bytes, bf16) and KV cache per sequence (MiB, bf16; fp32 doubles it) by layers held.",
        "A middle stage maps only its layers; the first stage adds the embedding and the last the same matrix as",
        f"the tied head ({gib(EMBED_BYTES)} GiB each; a single worker maps it once).",
        "",
        f"| layers held | sliding + full | weights, middle stage | weights, first or last stage | {kv_header} |",
        "|---|---|---:|---:|" + kv_rule,
    ]
    rows = [("1 sliding", 0, 1), ("1 full", 5, 6), ("6 (8 workers)", 0, 6), ("12 (4 workers)", 0, 12),
            ("24 (2 workers)", 0, 24), ("48 (1 worker)", 0, 48)]
    for label, b, e in rows:
        sliding = sum(1 for l in range(b, e) if LAYER_TYPES[l] == "sliding")
        kv = " | ".join(mib(kv_bytes(b, e, c)) for c in CONTEXTS)
        lines.append(f"| {label} | {sliding} + {e - b - sliding} | {gib(weight_bytes(b, e, False, False))} | "
                     f"{gib(weight_bytes(b, e, True, False))} | {kv} |")
    lines += [
        "",
        "The coordinator's default split (no --layer-split) by number of workers: the weights of its heaviest",
        "stage and the KV cache per sequence of the stage that needs the most.",
        "",
        f"| workers | default split | heaviest stage weights | {kv_header} |",
        "|---:|---|---:|" + kv_rule,
    ]
    for workers in (1, 2, 3, 4, 6, 8):
        ranges = plan_layer_ranges(workers)
        split = ",".join(f"{b}-{e - 1}" for b, e in ranges)
        heaviest = max(weight_bytes(b, e, s == 0, s == workers - 1) for s, (b, e) in enumerate(ranges))
        kv = " | ".join(mib(max(kv_bytes(b, e, c) for b, e in ranges)) for c in CONTEXTS)
        lines.append(f"| {workers} | {split} | {gib(heaviest)} | {kv} |")
    lines += [
        "",
        "Weights (GiB) by `--quantize` (docs/quantization.md): the decoder layers' matrices in its format, the",
        "embedding (tied head) and the norms as stored.",
        "",
        "| --quantize | 48 decoder layers | 24 layers (2 workers) | embedding | one worker, all layers |",
        "|---|---:|---:|---:|---:|",
    ]
    for flag, fmt in QUANTIZE:
        layers = lambda b, e: sum(layer_bytes(LAYER_TYPES[l], fmt) for l in range(b, e))  # noqa: E731
        lines.append(f"| {flag} | {gib(layers(0, 48))} | {gib(layers(0, 24))} | {gib(EMBED_BYTES)} | "
                     f"{gib(layers(0, 48) + EMBED_BYTES + FINAL_NORM_BYTES)} |")
    return "\n".join(lines) + "\n"


BEGIN, END = "<!-- sizing:begin (generated by deploy/sizing.py) -->", "<!-- sizing:end -->"


def check(path):
    text = open(path, encoding="utf-8").read()
    if BEGIN not in text or END not in text:
        print(f"{path}: the markers {BEGIN!r} and {END!r} are missing", file=sys.stderr)
        return 1
    found = text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"
    if found != tables():
        print(f"{path}: the sizing tables differ from `python3 deploy/sizing.py`; expected:\n{tables()}", file=sys.stderr)
        return 1
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", metavar="FILE", help="exit 1 unless FILE holds the current tables")
    args = parser.parse_args()
    if args.check:
        return check(args.check)
    sys.stdout.write(f"{BEGIN}\n{tables()}{END}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
