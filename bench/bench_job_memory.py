#!/usr/bin/python3
"""The coordinator's RSS while finished jobs accumulate, on a real loopback cluster (2 workers, the tiny
generated model): submits --jobs jobs of 16 tokens through SubmitJob from a few client threads, waits for
each to succeed, and prints the coordinator's VmRSS every tenth of the way, then the time of a ListJobs
page at that size. Run it twice to compare the job store (the default) with --state-dir '' (in memory).

  bench/bench_job_memory.py [--bin build/bin] [--jobs 20000] [--clients 8] [--in-memory | --state-dir DIR]

--state-dir starts the coordinator on an existing job store, e.g. one `bench_job_store --keep` filled with
a million finished jobs: the RSS and the ListJobs page are then those of a coordinator at that size.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import grpc

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(REPO, "tests"))
from pb_loader import load_layerpipe_pb2  # noqa: E402
from proc_harness import Process, small_checkpoint_argv  # noqa: E402

SERVICE = "/layerpipe.v1.LayerPipe/"


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "bin"))
    ap.add_argument("--jobs", type=int, default=20000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--in-memory", action="store_true", help="--state-dir '': the jobs in memory only")
    ap.add_argument("--state-dir", default=None, help="an existing job store to start on (default: a new one)")
    a = ap.parse_args()
    pb = load_layerpipe_pb2(REPO)
    work = tempfile.mkdtemp(prefix="bench_job_memory_")
    procs = []
    try:
        model = os.path.join(work, "model")
        subprocess.run(small_checkpoint_argv(os.path.join(a.bin, "layerpipe"), model, seed=3, max_positions=1024),
                       check=True, stdout=subprocess.DEVNULL)
        workers = [Process([os.path.join(a.bin, "layerpipe-worker"), "--listen", "127.0.0.1:0", "--threads", "1"],
                           f"worker{i}") for i in range(2)]
        procs += workers
        addresses = ",".join(w.wait_listening(60) for w in workers)
        state = ["--state-dir", "" if a.in_memory else a.state_dir or os.path.join(work, "state")]
        c = Process([os.path.join(a.bin, "layerpipe-coordinator"), "--listen", "127.0.0.1:0", "--model", model,
                     "--workers", addresses, *state], "coordinator")
        procs.append(c)
        channel = grpc.insecure_channel(c.wait_listening(60))

        def unary(method, req, resp):
            return channel.unary_unary(SERVICE + method, request_serializer=type(req).SerializeToString,
                                       response_deserializer=resp.FromString)(req, timeout=60)

        done = [0]
        lock = threading.Lock()
        report = max(1, a.jobs // 10)
        t0 = time.monotonic()
        print(f"bench_job_memory: {a.jobs} jobs of 16 tokens, {'in memory' if a.in_memory else 'job store'}, "
              f"coordinator RSS {rss_mib(c.pid):.1f} MiB before")
        print(f"{'jobs':>8} {'RSS MiB':>8} {'jobs/s':>8}")

        def client(k):
            i = k
            while i < a.jobs:
                req = pb.GenerateRequest(ids=pb.TokenIds(ids=[2, 5 + i % 400, 7]), max_new_tokens=16, stop_ids=[999999])
                job_id = unary("SubmitJob", pb.SubmitJobRequest(request=req), pb.SubmitJobResponse).job_id
                while unary("GetJob", pb.GetJobRequest(job_id=job_id), pb.JobInfo).state != pb.JOB_SUCCEEDED:
                    time.sleep(0.005)
                with lock:
                    done[0] += 1
                    if done[0] % report == 0:
                        print(f"{done[0]:>8} {rss_mib(c.pid):>8.1f} {done[0] / (time.monotonic() - t0):>8.0f}", flush=True)
                i += a.clients

        threads = [threading.Thread(target=client, args=(k,)) for k in range(a.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        best = min(timed(lambda: unary("ListJobs", pb.ListJobsRequest(page_size=100), pb.ListJobsResponse))
                   for _ in range(20))
        deep = min(timed(lambda: unary("ListJobs", pb.ListJobsRequest(page_size=100, state=pb.JOB_FAILED),
                                       pb.ListJobsResponse)) for _ in range(20))
        print(f"ListJobs page of 100: {best * 1000:.2f} ms; of failed jobs only: {deep * 1000:.2f} ms "
              f"(best of 20, over loopback gRPC)")
    finally:
        for p in procs:
            p.close()
        shutil.rmtree(work, ignore_errors=True)


def timed(f):
    t = time.monotonic()
    f()
    return time.monotonic() - t


if __name__ == "__main__":
    main()
