#!/usr/bin/python3
"""Time to first token of an image prompt through a cluster, against a text prompt of the same length.

Starts W workers and a coordinator on loopback (bench_cluster.py's Cluster), then sends, one at a time,
  * an image prompt: <bos> text, a 768x768 PNG (256 soft tokens, framed by boi/eoi), text; the PNG travels
    as an attachment and the coordinator decodes and prepares it;
  * the same number of text ids;
with max_new_tokens 1, and prints the median TTFT of each and their ratio (an image should cost no more
than its tokens). Figures, not a test.

  bench_image_ttft.py --bin build/bin --model DIR [--workers 2] [--threads 1] [--repeats 5]
"""

import argparse
import io
import os
import random
import statistics
import sys
import time

import grpc
import numpy as np
from PIL import Image  # Debian's python3-pil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from bench_cluster import Cluster  # noqa: E402
from pb_loader import load_layerpipe_pb2  # noqa: E402


def ttft(pb, channel, request):
    call = channel.unary_stream("/layerpipe.v1.LayerPipe/Generate",
                                request_serializer=pb.GenerateRequest.SerializeToString,
                                response_deserializer=pb.GenerateResponse.FromString)
    start = time.time()
    for msg in call(request):
        if msg.tokens:
            return time.time() - start
    raise RuntimeError("no token came back")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--model", required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--prefill-chunk", type=int, default=512)
    args = ap.parse_args()
    pb = load_layerpipe_pb2(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    rng = np.random.default_rng(1)
    png = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (768, 768, 3), dtype=np.uint8), "RGB").save(png, "PNG")
    ids = [2, 818, 5279, 255999] + [258880] * 256 + [258882, 563, 1037]
    image_req = pb.GenerateRequest(ids=pb.TokenIds(ids=ids), max_new_tokens=1, stop_ids=[1],
                                   attachments=[pb.Attachment(image=png.getvalue())])
    r = random.Random(2)
    text_req = pb.GenerateRequest(ids=pb.TokenIds(ids=[2] + [r.randrange(3, 200000) for _ in ids[1:]]),
                                  max_new_tokens=1, stop_ids=[1])
    cluster = Cluster(args.bin, args.model, args.workers, args.threads, args.prefill_chunk)
    try:
        channel = grpc.insecure_channel(cluster.address)
        ttft(pb, channel, text_req)  # warm the page cache and the pools
        ttft(pb, channel, image_req)
        image = statistics.median(ttft(pb, channel, image_req) for _ in range(args.repeats))
        text = statistics.median(ttft(pb, channel, text_req) for _ in range(args.repeats))
    finally:
        cluster.close()
    print(f"{len(ids)}-token prompt, {args.workers} workers x {args.threads} threads: "
          f"image TTFT {image * 1e3:.1f} ms, text TTFT {text * 1e3:.1f} ms, ratio {image / text:.2f}")


if __name__ == "__main__":
    main()
