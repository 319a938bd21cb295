#!/usr/bin/python3
"""Durable jobs across coordinator restarts (--state-dir), with real processes:

- the coordinator is killed with SIGKILL during a job's prefill, during its decode, and just after it
  finished; restarted with the same --state-dir it lists every job, resumes the unfinished ones by replay
  and ends each with exactly the tokens of an undisturbed run (greedy and seeded sampling alike), and
  StreamJob from an offset works across the restart; new job ids are never old ones;
- finished jobs are deleted after --job-retention, in memory and on disk;
- without --state-dir the jobs are kept in the default state directory (the XDG rule, made 0700) and survive
  a restart; a second coordinator on that directory refuses to start and names the first; --state-dir ''
  keeps them in memory and warns;
- a state directory whose database is corrupt, or is another application's SQLite database, stops the
  coordinator at start with a message naming the file, and the file is left as it was.

  durable_jobs_test.py --bin build/bin --src . --work DIR
"""

import argparse
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
import unittest

import grpc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pb_loader import load_layerpipe_pb2  # noqa: E402
from proc_harness import Process, small_checkpoint_argv  # noqa: E402

ARGS = None
pb = None
STARTUP_TIMEOUT = 60
PROMPT = [2] + [(7 * i) % 500 + 3 for i in range(1200)]   # a long prefill at --prefill-chunk 32
NEW = 300
MISSED_PREFILLS_ALLOWED = 4


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


class DurableJobsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        os.makedirs(ARGS.work, exist_ok=True)
        cls.model = os.path.join(ARGS.work, "model")
        shutil.rmtree(cls.model, ignore_errors=True)
        subprocess.run(small_checkpoint_argv(f"{ARGS.bin}/layerpipe", cls.model, seed=9, max_positions=4096),
                       check=True, stdout=subprocess.DEVNULL)
        cls.procs = []
        cls.addClassCleanup(lambda: [p.close() for p in cls.procs])
        # No prefix cache: the undisturbed runs would leave the prompt's first 1024 tokens cached, and the
        # job to be killed in prefill would then have only 6 chunks left to prefill, over before a poll sees it.
        workers = [cls.start([f"{ARGS.bin}/layerpipe-worker", "--listen", "127.0.0.1:0", "--threads", "1",
                              "--prefix-cache-budget", "0"], f"worker{i}")
                   for i in range(2)]
        cls.worker_addresses = ",".join(w.wait_listening(STARTUP_TIMEOUT) for w in workers)
        cls.coordinator = None

    @classmethod
    def start(cls, argv, name, env=None):
        p = Process(argv, name, ARGS.work, env=env)
        cls.procs.append(p)
        return p

    def start_coordinator(self, state_dir, *flags, env=None, wait=True):
        """A coordinator over the same workers; returns (process, channel) once it serves. state_dir None
        passes no --state-dir."""
        state = [] if state_dir is None else ["--state-dir", state_dir]
        c = self.start([f"{ARGS.bin}/layerpipe-coordinator", "--listen", "127.0.0.1:0", "--model", self.model,
                        "--workers", self.worker_addresses, "--prefill-chunk", "32", *state, *flags], "coordinator",
                       env=env)
        return (c, grpc.insecure_channel(c.wait_listening(STARTUP_TIMEOUT))) if wait else (c, None)

    @staticmethod
    def home_env(home):
        """This environment with HOME at `home` and neither state variable set (empty counts as unset)."""
        shutil.rmtree(home, ignore_errors=True)
        os.makedirs(home)
        return dict(os.environ, HOME=home, LAYERPIPE_STATE_DIR="", XDG_STATE_HOME="")

    def test_jobs_are_durable_by_default_and_one_coordinator_holds_them(self):
        env = self.home_env(os.path.join(ARGS.work, "home_default"))
        state = os.path.join(env["HOME"], ".local", "state", "layerpipe")
        c, ch = self.start_coordinator(None, env=env)
        c.wait_stderr(r"jobs are kept in " + re.escape(state), 10)
        self.assertEqual(os.stat(state).st_mode & 0o777, 0o700)
        short = pb.GenerateRequest(ids=pb.TokenIds(ids=[2, 5, 6]), max_new_tokens=4, stop_ids=[999999])
        done = self.unary(ch, "SubmitJob", pb.SubmitJobRequest(request=short), pb.SubmitJobResponse).job_id
        want = list(self.wait_until(ch, done, lambda j: j.state == pb.JOB_SUCCEEDED, "succeeded").ids)
        running = self.submit(ch, sampled=False)
        self.wait_until(ch, running, lambda j: j.generated_tokens > 0, "decoded")

        # A second coordinator on the same directory refuses before it serves, naming the holder.
        second, _ = self.start_coordinator(None, env=env, wait=False)
        self.assertEqual(second.wait(30), 1, second.tail())
        self.assertIn("is in use by another coordinator", second.stderr_text())
        self.assertIn(f"pid {c.pid} on host ", second.stderr_text())
        self.assertEqual(self.job(ch, done).state, pb.JOB_SUCCEEDED)  # the first one serves on

        c.kill_group()
        c, ch = self.start_coordinator(None, env=env)
        self.assertEqual(list(self.job(ch, done).ids), want)
        info = self.wait_until(ch, running, lambda j: j.state in (pb.JOB_SUCCEEDED, pb.JOB_FAILED), "ended")
        self.assertEqual(info.state, pb.JOB_SUCCEEDED, info.error)
        self.assertEqual(len(info.ids), NEW)
        listed = self.unary(ch, "ListJobs", pb.ListJobsRequest(), pb.ListJobsResponse)
        self.assertEqual([j.job_id for j in listed.jobs], [running, done])  # newest first
        c.kill_group()

    def pages(self, channel, size, state=0):
        """Every page of ListJobs at `size` (state 0: every state), as lists of ids, following next_page_token."""
        pages, token = [], ""
        while True:
            resp = self.unary(channel, "ListJobs", pb.ListJobsRequest(page_size=size, page_token=token, state=state),
                              pb.ListJobsResponse)
            pages.append([j.job_id for j in resp.jobs])
            token = resp.next_page_token
            if not token:
                return pages

    def check_pages(self, channel, ids, succeeded):
        """ids in submission order; succeeded: those of them that succeeded."""
        newest = ids[::-1]
        self.assertEqual(self.pages(channel, 3), [newest[i:i + 3] for i in range(0, len(newest), 3)])
        self.assertEqual(self.pages(channel, 0), [newest])  # the default page (100) holds them all
        self.assertEqual(self.pages(channel, 2, pb.JOB_SUCCEEDED),
                         [succeeded[::-1][i:i + 2] for i in range(0, len(succeeded), 2)])
        first = self.unary(channel, "ListJobs", pb.ListJobsRequest(page_size=2, state=pb.JOB_SUCCEEDED), pb.ListJobsResponse)
        for bad, needle in [(pb.ListJobsRequest(page_size=2, page_token=first.next_page_token), "state succeeded"),
                            (pb.ListJobsRequest(page_token="not-a-token"), "page_token"),
                            (pb.ListJobsRequest(page_size=-1), "page_size")]:
            with self.assertRaises(grpc.RpcError) as err:
                self.unary(channel, "ListJobs", bad, pb.ListJobsResponse)
            self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, bad)
            self.assertIn(needle, err.exception.details())

    def test_list_jobs_pages_newest_first_from_memory_and_from_the_store(self):
        state = os.path.join(ARGS.work, "state_pages")
        shutil.rmtree(state, ignore_errors=True)
        c, ch = self.start_coordinator(state)
        ids = []
        for i in range(8):
            short = pb.GenerateRequest(ids=pb.TokenIds(ids=[2, 5, 6 + i]), max_new_tokens=2, stop_ids=[999999])
            ids.append(self.unary(ch, "SubmitJob", pb.SubmitJobRequest(request=short), pb.SubmitJobResponse).job_id)
            self.wait_until(ch, ids[-1], lambda j: j.state == pb.JOB_SUCCEEDED, "succeeded")
        ids.append(self.submit(ch, sampled=False))  # a long one, cancelled
        self.unary(ch, "CancelJob", pb.CancelJobRequest(job_id=ids[-1]), pb.JobInfo)
        self.wait_until(ch, ids[-1], lambda j: j.state == pb.JOB_CANCELLED, "cancelled")
        self.check_pages(ch, ids, ids[:8])
        c.kill_group()
        # After a restart every one of them is finished: the pages and each job come from the store alone.
        c, ch = self.start_coordinator(state)
        c.wait_stderr(r"resumed 0 unfinished jobs", 10)
        self.check_pages(ch, ids, ids[:8])
        self.assertEqual(self.job(ch, ids[0]).generated_tokens, 2)
        self.assertEqual(len(self.job(ch, ids[0]).ids), 2)
        self.assertEqual(self.stream(ch, "StreamJob", pb.StreamJobRequest(job_id=ids[1], offset=1)),
                         list(self.job(ch, ids[1]).ids)[1:])
        self.assertEqual(self.job(ch, ids[-1]).state, pb.JOB_CANCELLED)
        c.kill_group()
        # In memory (--state-dir ''), the same pages.
        c, ch = self.start_coordinator("")
        mem = []
        for i in range(5):
            short = pb.GenerateRequest(ids=pb.TokenIds(ids=[2, 5, 6 + i]), max_new_tokens=2, stop_ids=[999999])
            mem.append(self.unary(ch, "SubmitJob", pb.SubmitJobRequest(request=short), pb.SubmitJobResponse).job_id)
            self.wait_until(ch, mem[-1], lambda j: j.state == pb.JOB_SUCCEEDED, "succeeded")
        self.check_pages(ch, mem, mem)
        c.kill_group()

    def test_an_empty_state_dir_keeps_jobs_in_memory_and_warns(self):
        env = self.home_env(os.path.join(ARGS.work, "home_memory"))
        c, ch = self.start_coordinator("", env=env)
        c.wait_stderr(r"--state-dir '': jobs are kept in memory only", 10)
        short = pb.GenerateRequest(ids=pb.TokenIds(ids=[2, 5, 6]), max_new_tokens=2, stop_ids=[999999])
        job_id = self.unary(ch, "SubmitJob", pb.SubmitJobRequest(request=short), pb.SubmitJobResponse).job_id
        self.wait_until(ch, job_id, lambda j: j.state == pb.JOB_SUCCEEDED, "succeeded")
        self.assertEqual(os.listdir(env["HOME"]), [], "a coordinator told to keep jobs in memory wrote a state dir")
        c.kill_group()
        c, ch = self.start_coordinator("", env=env)
        with self.assertRaises(grpc.RpcError) as err:
            self.job(ch, job_id)
        self.assertEqual(err.exception.code(), grpc.StatusCode.NOT_FOUND)
        c.kill_group()

    def unary(self, channel, method, request, response_type):
        call = channel.unary_unary(f"/layerpipe.v1.LayerPipe/{method}", request_serializer=type(request).SerializeToString,
                                   response_deserializer=response_type.FromString)
        return call(request, timeout=60)

    def stream(self, channel, method, request):
        call = channel.unary_stream(f"/layerpipe.v1.LayerPipe/{method}", request_serializer=type(request).SerializeToString,
                                    response_deserializer=pb.GenerateResponse.FromString)
        return [t.id for msg in call(request, timeout=300) for t in msg.tokens]

    def request(self, sampled):
        sampling = pb.SamplingParams(temperature=1.0, top_k=50, seed=11) if sampled else pb.SamplingParams()
        # A stop id beyond the vocabulary: every run takes its whole budget, long enough to be killed in.
        return pb.GenerateRequest(ids=pb.TokenIds(ids=PROMPT), max_new_tokens=NEW, sampling=sampling,
                                  stop_ids=[999999])

    def submit(self, channel, sampled):
        return self.unary(channel, "SubmitJob", pb.SubmitJobRequest(request=self.request(sampled)),
                          pb.SubmitJobResponse).job_id

    def job(self, channel, job_id):
        return self.unary(channel, "GetJob", pb.GetJobRequest(job_id=job_id), pb.JobInfo)

    def wait_until(self, channel, job_id, pred, what, timeout=120):
        deadline = time.monotonic() + timeout
        while not pred(info := self.job(channel, job_id)):
            self.assertLess(time.monotonic(), deadline, f"job {job_id} never {what}: {info}")
            time.sleep(0.01)
        return info

    def test_jobs_survive_coordinator_kills_at_every_moment(self):
        state = os.path.join(ARGS.work, "state_kills")
        shutil.rmtree(state, ignore_errors=True)
        c, ch = self.start_coordinator(state)
        # Undisturbed runs: what every job must end with.
        want = {s: self.stream(ch, "Generate", self.request(s)) for s in (False, True)}
        self.assertEqual(len(want[False]), NEW)
        self.assertNotEqual(want[False], want[True])

        ids = {}
        # 1. Killed in prefill (part of the prompt is in the KV cache, nothing generated yet). The whole
        # prefill takes ~70 ms here: a poller descheduled that long (a busy CI machine) sees the job only
        # once it decodes. Such a job is cancelled and another one submitted (the listing keeps it).
        missed = []
        for _ in range(MISSED_PREFILLS_ALLOWED + 1):
            ids["prefill"] = self.submit(ch, sampled=False)
            info = self.wait_until(ch, ids["prefill"], lambda j: j.prefilled_tokens > 0, "prefilled")
            if info.generated_tokens == 0:
                break
            self.unary(ch, "CancelJob", pb.CancelJobRequest(job_id=ids["prefill"]), pb.JobInfo)
            missed.append(ids.pop("prefill"))
        self.assertIn("prefill", ids, f"every poll saw the job after its prefill ({len(missed)} tries)")
        self.assertLess(info.prefilled_tokens, len(PROMPT))
        c.kill_group()
        c, ch = self.start_coordinator(state)
        # 2. Killed in decode, with a sampled job alongside.
        ids["decode"] = self.submit(ch, sampled=False)
        ids["sampled"] = self.submit(ch, sampled=True)
        self.wait_until(ch, ids["sampled"], lambda j: j.generated_tokens >= 40, "decoded 40 tokens")
        before = self.job(ch, ids["decode"])
        offset = before.generated_tokens
        self.assertGreater(offset, 0)
        self.assertLess(offset, NEW)
        had = self.job(ch, ids["sampled"]).generated_tokens
        c.kill_group()
        restarted = time.monotonic()
        c, ch = self.start_coordinator(state)
        serving = time.monotonic() - restarted
        self.wait_until(ch, ids["sampled"], lambda j: j.generated_tokens > had, "went on")
        print(f"\n[restart: serving after {serving:.2f} s, the job in decode past its last token after "
              f"{time.monotonic() - restarted:.2f} s]")
        # Streaming from the offset seen before the kill gives the rest, across the restart.
        self.assertEqual(self.stream(ch, "StreamJob", pb.StreamJobRequest(job_id=ids["decode"], offset=offset)),
                         want[False][offset:])
        # 3. Killed just after a job finished.
        self.wait_until(ch, ids["sampled"], lambda j: j.state == pb.JOB_SUCCEEDED, "succeeded")
        c.kill_group()
        c, ch = self.start_coordinator(state)

        listed = self.unary(ch, "ListJobs", pb.ListJobsRequest(), pb.ListJobsResponse)
        self.assertEqual([j.job_id for j in listed.jobs], [ids["sampled"], ids["decode"], ids["prefill"]] + missed[::-1])
        for name, job_id in ids.items():
            info = self.wait_until(ch, job_id, lambda j: j.state in (pb.JOB_SUCCEEDED, pb.JOB_FAILED), "ended")
            self.assertEqual(info.state, pb.JOB_SUCCEEDED, f"{name}: {info.error}")
            self.assertEqual(list(info.ids), want[name == "sampled"], name)
            self.assertEqual(info.finish_reason, "length", name)
            self.assertEqual(self.stream(ch, "StreamJob", pb.StreamJobRequest(job_id=job_id, offset=7)),
                             want[name == "sampled"][7:], name)
        # Ids are never reissued, and a new job runs as usual after three restarts.
        new_id = self.submit(ch, sampled=False)
        self.assertNotIn(new_id, ids.values())
        self.assertEqual(list(self.wait_until(ch, new_id, lambda j: j.state == pb.JOB_SUCCEEDED, "succeeded").ids),
                         want[False])
        c.kill_group()

    def test_a_job_with_an_image_survives_a_restart(self):
        """The stored request keeps its attachment: after a kill in decode the restored job embeds the image
        again and ends with the tokens an undisturbed run gives."""
        import io
        from PIL import Image  # Debian's python3-pil
        png = io.BytesIO()
        Image.frombytes("RGB", (96, 64), bytes((i * 5) % 251 for i in range(96 * 64 * 3))).save(png, "PNG")
        # 96x64 is resized to 960x624: 20 x 13 = 260 soft tokens.
        ids = PROMPT[:3] + [255999] + [258880] * 260 + [258882] + PROMPT[3:]
        request = pb.GenerateRequest(ids=pb.TokenIds(ids=ids), max_new_tokens=NEW, stop_ids=[999999],
                                     attachments=[pb.Attachment(image=png.getvalue())])
        # The image ids need the whole vocabulary, which the other tests' checkpoint lacks.
        model = os.path.join(ARGS.work, "model_mm")
        shutil.rmtree(model, ignore_errors=True)
        argv = small_checkpoint_argv(f"{ARGS.bin}/layerpipe", model, seed=9, max_positions=4096)
        del argv[argv.index("--vocab"):argv.index("--vocab") + 2]
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        state = os.path.join(ARGS.work, "state_image")
        shutil.rmtree(state, ignore_errors=True)
        c, ch = self.start_coordinator(state, "--model", model)
        want = self.stream(ch, "Generate", request)
        self.assertEqual(len(want), NEW)
        job_id = self.unary(ch, "SubmitJob", pb.SubmitJobRequest(request=request), pb.SubmitJobResponse).job_id
        self.wait_until(ch, job_id, lambda j: j.generated_tokens > 0, "decoded")
        c.kill_group()
        c, ch = self.start_coordinator(state, "--model", model)
        info = self.wait_until(ch, job_id, lambda j: j.state in (pb.JOB_SUCCEEDED, pb.JOB_FAILED), "ended")
        self.assertEqual(info.state, pb.JOB_SUCCEEDED, info.error)
        self.assertEqual(info.prompt_tokens, len(ids))
        self.assertEqual(list(info.ids), want)
        c.kill_group()

    def test_finished_jobs_are_deleted_after_the_retention(self):
        state = os.path.join(ARGS.work, "state_retention")
        shutil.rmtree(state, ignore_errors=True)
        c, ch = self.start_coordinator(state, "--job-retention", "2s")
        short = pb.GenerateRequest(ids=pb.TokenIds(ids=[2, 5, 6]), max_new_tokens=3, stop_ids=[1])
        job_id = self.unary(ch, "SubmitJob", pb.SubmitJobRequest(request=short), pb.SubmitJobResponse).job_id
        self.wait_until(ch, job_id, lambda j: j.state == pb.JOB_SUCCEEDED, "succeeded")
        listed = lambda: [j.job_id for j in self.unary(ch, "ListJobs", pb.ListJobsRequest(), pb.ListJobsResponse).jobs]  # noqa: E731
        self.assertEqual(listed(), [job_id])
        deadline = time.monotonic() + 10
        while listed():
            self.assertLess(time.monotonic(), deadline, "the finished job outlived its retention")
            time.sleep(0.2)
        with self.assertRaises(grpc.RpcError) as err:
            self.job(ch, job_id)
        self.assertEqual(err.exception.code(), grpc.StatusCode.NOT_FOUND)
        c.kill_group()
        c, ch = self.start_coordinator(state, "--job-retention", "2s")
        self.assertEqual(listed(), [])  # gone from the database too
        c.kill_group()

    def test_a_database_that_is_not_ours_stops_the_start(self):
        for name, make in [("garbage", self.write_garbage), ("foreign", self.write_foreign)]:
            state = os.path.join(ARGS.work, f"state_{name}")
            shutil.rmtree(state, ignore_errors=True)
            os.makedirs(state)
            path = os.path.join(state, "jobs.sqlite3")
            make(path)
            before = read_bytes(path)
            c = self.start([f"{ARGS.bin}/layerpipe-coordinator", "--listen", "127.0.0.1:0", "--model", self.model,
                            "--workers", self.worker_addresses, "--state-dir", state], f"coordinator_{name}")
            self.assertEqual(c.wait(30), 1, name)
            self.assertIn(path, c.stderr_text(), name)
            self.assertIn("--state-dir", c.stderr_text(), name)
            self.assertEqual(read_bytes(path), before, f"{name}: the file was changed")

    @staticmethod
    def write_garbage(path):
        with open(path, "wb") as f:
            f.write(os.urandom(8192))

    @staticmethod
    def write_foreign(path):
        db = sqlite3.connect(path)
        db.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
        db.execute("INSERT INTO invoices VALUES (1, 9.5)")
        db.commit()
        db.close()


def main():
    global ARGS, pb
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--work", required=True)
    ARGS, rest = ap.parse_known_args()
    pb = load_layerpipe_pb2(ARGS.src)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
