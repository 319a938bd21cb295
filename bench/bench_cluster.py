#!/usr/bin/python3
"""Pipeline throughput of the cluster against one worker serving every layer.

Starts the workers and the coordinator on loopback, then measures
  * decode: total generated tokens/s of N concurrent greedy sequences;
  * prefill: time to first token of one long prompt (its chunks follow each other down the pipe).
for each configuration, and prints a table. Figures, not a test.

  bench_cluster.py --bin build/bin --model DIR [--configs 1x2,2x1,2x2] [--sequences 8]

A configuration WxT is W workers with T compute threads each.
"""

import argparse
import os
import random
import sys
import threading
import time

import grpc


sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from pb_loader import load_layerpipe_pb2  # noqa: E402
from proc_harness import Process  # noqa: E402


class Cluster:
    def __init__(self, bin_dir, model, workers, threads, prefill_chunk, worker_flags=()):
        self.procs = []
        try:
            addrs = []
            for i in range(workers):
                addrs.append(self.start([f"{bin_dir}/layerpipe-worker", "--listen", "127.0.0.1:0", "--threads",
                                         str(threads), *worker_flags], f"worker{i}").wait_listening(None))
            c = self.start([f"{bin_dir}/layerpipe-coordinator", "--listen", "127.0.0.1:0", "--model", model,
                            "--workers", ",".join(addrs), f"--prefill-chunk={prefill_chunk}"], "coordinator")
            self.address = c.wait_listening(None)
        except BaseException:
            self.close()
            raise

    def start(self, argv, name):
        p = Process(argv, name)
        self.procs.append(p)
        return p

    def close(self):
        for p in self.procs:
            p.close()


def generate(pb, channel, prompt, new_tokens):
    call = channel.unary_stream("/layerpipe.v1.LayerPipe/Generate",
                                request_serializer=pb.GenerateRequest.SerializeToString,
                                response_deserializer=pb.GenerateResponse.FromString)
    start = time.time()
    first = None
    count = 0
    for msg in call(pb.GenerateRequest(ids=pb.TokenIds(ids=prompt), max_new_tokens=new_tokens, stop_ids=[1])):
        if msg.tokens and first is None:
            first = time.time()
        count += len(msg.tokens)
    return first - start, time.time() - start, count


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--model", required=True)
    ap.add_argument("--configs", default="1x2,2x1,2x2")
    ap.add_argument("--sequences", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=24)
    ap.add_argument("--long-prompt", type=int, default=1024)
    ap.add_argument("--prefill-chunk", type=int, default=256)
    args = ap.parse_args()
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    pb = load_layerpipe_pb2(repo)
    rng = random.Random(1)
    prompts = [[2] + [rng.randrange(3, 1000) for _ in range(15)] for _ in range(args.sequences)]
    long_prompt = [2] + [rng.randrange(3, 1000) for _ in range(args.long_prompt - 1)]

    print(f"{'config':>8} {'decode tok/s':>13} {'(N seqs)':>9} {'long-prompt TTFT s':>19}")
    for cfg in args.configs.split(","):
        workers, threads = (int(x) for x in cfg.split("x"))
        cluster = Cluster(args.bin, args.model, workers, threads, args.prefill_chunk)
        try:
            channel = grpc.insecure_channel(cluster.address)
            generate(pb, channel, prompts[0], 2)  # warm the page cache and the pools
            results = [None] * len(prompts)
            start = time.time()
            threads_ = [threading.Thread(target=lambda i=i: results.__setitem__(
                i, generate(pb, channel, prompts[i], args.new_tokens))) for i in range(len(prompts))]
            for t in threads_:
                t.start()
            for t in threads_:
                t.join()
            wall = time.time() - start
            total = sum(r[2] for r in results)
            ttft, _, _ = generate(pb, channel, long_prompt, 1)
            print(f"{cfg:>8} {total / wall:13.2f} {len(prompts):9d} {ttft:19.2f}")
        finally:
            cluster.close()


if __name__ == "__main__":
    main()
