#!/usr/bin/python3
"""Streaming over the OpenAI-compatible HTTP port against the gRPC port, same request, same cluster.

Starts 2 workers and a coordinator on loopback (plaintext, no tokens) and runs one greedy chat request
of --tokens tokens at a time, alternating the front ends, --runs times each; prints the median time to the
first streamed token (request sent -> first token's bytes read) and the median streamed tokens/s after
it. Figures, not a test.

  bench_http.py --bin build/bin --model DIR [--tokens 128] [--runs 10]
"""

import argparse
import http.client
import json
import os
import statistics
import sys
import time

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from pb_loader import load_layerpipe_pb2  # noqa: E402
from proc_harness import Process  # noqa: E402

MESSAGES = [{"role": "user", "content": "Tell me about pipelines."}]


def grpc_run(pb, channel, tokens):
    call = channel.unary_stream("/layerpipe.v1.LayerPipe/Generate", request_serializer=pb.GenerateRequest.SerializeToString,
                                response_deserializer=pb.GenerateResponse.FromString)
    conv = pb.Conversation(messages=[pb.ChatMessage(**m) for m in MESSAGES])
    start = time.perf_counter()
    first, n = None, 0
    for msg in call(pb.GenerateRequest(messages=conv, max_new_tokens=tokens, stop_ids=[999999]), timeout=600):
        if msg.tokens and first is None:
            first = time.perf_counter()
        n += len(msg.tokens)
    return first - start, (n - 1) / (time.perf_counter() - first), n


def http_run(host, port, tokens):
    conn = http.client.HTTPConnection(host, port, timeout=600)
    body = json.dumps({"messages": MESSAGES, "max_tokens": tokens, "temperature": 0, "stream": True,
                       "stop_token_ids": [999999]})
    start = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    first, n = None, 0
    for line in r:
        if not line.startswith(b"data: {"):
            continue
        chunk = json.loads(line[6:])
        if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
            if first is None:
                first = time.perf_counter()
            n += 1
    conn.close()
    return first - start, (n - 1) / (time.perf_counter() - first), n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    pb = load_layerpipe_pb2(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    procs = []
    try:
        workers = []
        for i in range(2):
            procs.append(Process([f"{args.bin}/layerpipe-worker", "--listen", "127.0.0.1:0", "--threads", "1"], f"w{i}"))
            workers.append(procs[-1].wait_listening(60))
        procs.append(Process([f"{args.bin}/layerpipe-coordinator", "--listen", "127.0.0.1:0", "--model", args.model,
                              "--workers", ",".join(workers), "--http-listen", "127.0.0.1:0"], "coordinator"))
        http_address = procs[-1].wait_for(r"http port on (\S+)", 60).group(1)
        channel = grpc.insecure_channel(procs[-1].wait_listening(60))
        host, port = http_address.rsplit(":", 1)
        results = {"grpc": [], "http": []}
        grpc_run(pb, channel, 8)  # warm both paths
        http_run(host, int(port), 8)
        for _ in range(args.runs):
            results["grpc"].append(grpc_run(pb, channel, args.tokens))
            results["http"].append(http_run(host, int(port), args.tokens))
        print(f"{args.tokens} tokens per request, {args.runs} runs each, medians")
        print(f"{'front end':10} {'first token ms':>15} {'tokens/s':>10}")
        for name, runs in results.items():
            assert all(n == args.tokens for _, _, n in runs), f"{name}: short answers {[n for _, _, n in runs]}"
            print(f"{name:10} {1e3 * statistics.median(r[0] for r in runs):15.2f} "
                  f"{statistics.median(r[1] for r in runs):10.1f}")
    finally:
        for p in procs:
            p.close()


if __name__ == "__main__":
    main()
