#!/usr/bin/python3
"""Coordinator behaviour that needs real processes: KV admission, cancel freeing KV on every stage,
a long prompt not starving short requests, and a hung worker caught by deadlines.

  coordinator_behaviour_test.py --bin build/bin --src . --work DIR
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import unittest

import grpc

ARGS = None
pb = None
wire = None  # the worker and step planes' messages


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pb_loader import load_internal_pb2, load_layerpipe_pb2  # noqa: E402
from proc_harness import Process, small_checkpoint_argv  # noqa: E402

STARTUP_TIMEOUT = 60  # seconds for a server's "listening on" line


def load_pb():
    return load_layerpipe_pb2(ARGS.src)


class Cluster:
    """Workers and a coordinator on 127.0.0.1 with ephemeral ports; killed on close."""

    def __init__(self, model, workers=2, kv_budget=None, coordinator_flags=()):
        self.procs = []
        self.workers = []
        try:
            for i in range(workers):
                cmd = [f"{ARGS.bin}/layerpipe-worker", "--listen", "127.0.0.1:0", "--threads", "1"]
                if kv_budget:
                    cmd += ["--kv-budget", kv_budget]
                p = self.start(cmd, f"worker{i}")
                self.workers.append((p, p.wait_listening(STARTUP_TIMEOUT)))
            self.coordinator = self.start(
                [f"{ARGS.bin}/layerpipe-coordinator", "--listen", "127.0.0.1:0", "--model", model,
                 "--workers", ",".join(a for _, a in self.workers), *coordinator_flags], "coordinator")
            self.address = self.coordinator.wait_listening(STARTUP_TIMEOUT)
        except BaseException:
            self.close()  # the caller has no Cluster to close yet
            raise
        self.channel = grpc.insecure_channel(self.address)

    def start(self, argv, name):
        p = Process(argv, name, ARGS.work)
        self.procs.append(p)
        return p

    def unary(self, method, request, response_type, timeout=60):
        call = self.channel.unary_unary(f"/layerpipe.v1.LayerPipe/{method}",
                                        request_serializer=type(request).SerializeToString,
                                        response_deserializer=response_type.FromString)
        return call(request, timeout=timeout)

    def generate(self, ids, new_tokens, timeout=120):
        call = self.channel.unary_stream("/layerpipe.v1.LayerPipe/Generate",
                                         request_serializer=pb.GenerateRequest.SerializeToString,
                                         response_deserializer=pb.GenerateResponse.FromString)
        out = []
        for msg in call(pb.GenerateRequest(ids=pb.TokenIds(ids=ids), max_new_tokens=new_tokens, stop_ids=[1]),
                        timeout=timeout):
            out += [t.id for t in msg.tokens]
        return out

    def kv_used(self):
        status = self.unary("ClusterStatus", pb.ClusterStatusRequest(), pb.ClusterStatusResponse)
        return [s.kv_bytes_used for s in status.stages]

    def close(self):
        for p in self.procs:
            p.close()


class CoordinatorBehaviourTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = os.path.join(ARGS.work, "model")
        shutil.rmtree(cls.model, ignore_errors=True)
        # Full layers at 2 and 5; window 8 is shorter than the prompts.
        subprocess.run(small_checkpoint_argv(f"{ARGS.bin}/layerpipe", cls.model, seed=4, max_positions=200000),
                       check=True, stdout=subprocess.DEVNULL)
        # The same with the real tokenizer, for the text entry points (its vocabulary is larger than the model's).
        cls.text_model = os.path.join(ARGS.work, "text_model")
        shutil.rmtree(cls.text_model, ignore_errors=True)
        tokenizer = os.path.join(ARGS.src, "third_party", "npm", "node_modules", "@lenml", "tokenizer-gemma3",
                                 "models", "tokenizer.json")
        subprocess.run(small_checkpoint_argv(f"{ARGS.bin}/layerpipe", cls.text_model, seed=4) + ["--tokenizer", tokenizer],
                       check=True, stdout=subprocess.DEVNULL)

    def test_request_that_can_never_fit_is_refused_with_the_numbers(self):
        # 2 MB of KV per worker: the sliding rings fit, 100k tokens of global cache do not.
        c = Cluster(self.model, kv_budget="2M")
        try:
            with self.assertRaises(grpc.RpcError) as err:
                c.generate([2, 5, 6], 100000)
            self.assertEqual(err.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
            self.assertRegex(err.exception.details(), r"needs \d+ bytes of KV cache on stage \d .* capacity is \d+")
            # The cluster keeps serving requests that fit.
            self.assertEqual(len(c.generate([2, 5, 6], 4)), 4)
        finally:
            c.close()

    def test_cancel_frees_kv_on_every_stage(self):
        c = Cluster(self.model)
        try:
            job = c.unary("SubmitJob", pb.SubmitJobRequest(request=pb.GenerateRequest(
                ids=pb.TokenIds(ids=[2] + list(range(3, 300))), max_new_tokens=5000, stop_ids=[1])),
                pb.SubmitJobResponse)
            deadline = time.time() + 30
            while time.time() < deadline and not all(c.kv_used()):
                time.sleep(0.05)
            self.assertTrue(all(c.kv_used()), "the job never held KV on every stage")
            info = c.unary("CancelJob", pb.CancelJobRequest(job_id=job.job_id), pb.JobInfo)
            deadline = time.time() + 30
            while time.time() < deadline and any(c.kv_used()):
                time.sleep(0.05)
            self.assertEqual(c.kv_used(), [0, 0])
            info = c.unary("GetJob", pb.GetJobRequest(job_id=job.job_id), pb.JobInfo)
            self.assertEqual(info.state, pb.JOB_CANCELLED)
            with self.assertRaises(grpc.RpcError) as err:
                c.unary("GetJob", pb.GetJobRequest(job_id="job-nope"), pb.JobInfo)
            self.assertEqual(err.exception.code(), grpc.StatusCode.NOT_FOUND)
        finally:
            c.close()

    def test_overlong_text_is_refused_before_tokenizing(self):
        # 50 MB of text cannot fit any context: OUT_OF_RANGE at once, from Generate, Score and Tokenize.
        c = Cluster(self.text_model)
        try:
            text = "word " * 10_000_000
            stream = c.channel.unary_stream("/layerpipe.v1.LayerPipe/Generate",
                                            request_serializer=pb.GenerateRequest.SerializeToString,
                                            response_deserializer=pb.GenerateResponse.FromString)
            calls = [("Generate", lambda: list(stream(pb.GenerateRequest(prompt=text, max_new_tokens=1), timeout=60))),
                     ("Score", lambda: c.unary("Score", pb.ScoreRequest(text=text), pb.ScoreResponse)),
                     ("Tokenize", lambda: c.unary("Tokenize", pb.TokenizeRequest(text=text), pb.TokenizeResponse))]
            for name, call in calls:
                start = time.monotonic()
                with self.assertRaises(grpc.RpcError) as err:
                    call()
                self.assertEqual(err.exception.code(), grpc.StatusCode.OUT_OF_RANGE, name)
                self.assertIn("beyond the model's context", err.exception.details(), name)
                self.assertLess(time.monotonic() - start, 10, f"{name} tokenized the text first")
            self.assertEqual(len(c.generate([2, 5, 6], 2)), 2)
        finally:
            c.close()

    def test_text_beyond_the_models_vocabulary_is_refused_up_front(self):
        # The tokenizer knows 262k ids, this model 512: such a prompt is refused by the coordinator, never
        # sent to a stage (which would refuse its frame on every replay).
        c = Cluster(self.text_model)
        try:
            stream = c.channel.unary_stream("/layerpipe.v1.LayerPipe/Generate",
                                            request_serializer=pb.GenerateRequest.SerializeToString,
                                            response_deserializer=pb.GenerateResponse.FromString)
            for req in [pb.GenerateRequest(prompt="Hello there", max_new_tokens=2),
                        pb.GenerateRequest(messages=pb.Conversation(messages=[pb.ChatMessage(role="user", content="Hi")]),
                                           max_new_tokens=2)]:
                with self.assertRaises(grpc.RpcError) as err:
                    list(stream(req, timeout=30))
                self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                self.assertIn("outside the vocabulary [0, 512)", err.exception.details())
            self.assertEqual(len(c.generate([2, 5, 6], 2)), 2)
            self.assertNotIn("recovering", c.coordinator.stderr_text())
        finally:
            c.close()

    def test_operator_limits_refuse_before_the_pipeline_and_are_counted(self):
        c = Cluster(self.model, coordinator_flags=["--max-model-len", "64", "--max-new-tokens", "8",
                                                   "--metrics-listen", "127.0.0.1:0"])
        try:
            port = int(c.coordinator.wait_stderr(r"metrics on http://[^\s/]+:(\d+)/metrics", 10).group(1))
            stream = c.channel.unary_stream("/layerpipe.v1.LayerPipe/Generate",
                                            request_serializer=pb.GenerateRequest.SerializeToString,
                                            response_deserializer=pb.GenerateResponse.FromString)
            cases = [(pb.GenerateRequest(ids=pb.TokenIds(ids=[2, 5, 6]), max_new_tokens=9), grpc.StatusCode.INVALID_ARGUMENT,
                      "max_new_tokens of 9 is above this server's limit of 8"),
                     (pb.GenerateRequest(ids=pb.TokenIds(ids=[2] * 60), max_new_tokens=8), grpc.StatusCode.OUT_OF_RANGE,
                      "exceeds this server's limit of 64 tokens"),
                     (pb.GenerateRequest(ids=pb.TokenIds(ids=[2] * 64), max_new_tokens=1), grpc.StatusCode.OUT_OF_RANGE,
                      "leaves no room to generate")]
            for req, code, message in cases:
                with self.assertRaises(grpc.RpcError) as err:
                    list(stream(req, timeout=30))
                self.assertEqual(err.exception.code(), code, message)
                self.assertIn(message, err.exception.details())
            score = pb.ScoreRequest(ids=pb.TokenIds(ids=[2] * 65))
            with self.assertRaises(grpc.RpcError) as err:
                c.unary("Score", score, pb.ScoreResponse)
            self.assertEqual(err.exception.code(), grpc.StatusCode.OUT_OF_RANGE)
            # Within the limits all is as usual: 56 + 8 tokens fill the 64 allowed.
            self.assertEqual(len(c.generate([2] * 56, 8)), 8)
            import urllib.request
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
            counts = {line.split("{")[1].split("}")[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                      if line.startswith("layerpipe_requests_refused_total{")}
            self.assertEqual(counts['reason="invalid"'], 1, counts)
            self.assertEqual(counts['reason="too_long"'], 3, counts)
        finally:
            c.close()

    def test_text_that_is_not_utf8_is_refused_naming_the_field(self):
        # Hand-encoded requests (a client library would refuse to build them): bytes 0xff 0xfe in a string.
        def field(number, payload):
            return bytes([number << 3 | 2, len(payload)]) + payload
        bad = b"\xff\xfe"
        message = field(2, b"user") + field(2, b"x") + field(2, bad)  # ChatMessage: role, then content twice
        cases = [("Generate", field(1, bad) + bytes([5 << 3, 4]), "GenerateRequest.prompt"),
                 ("Generate", field(1, b"hi") + field(7, bad) + bytes([5 << 3, 4]), "GenerateRequest.stop"),
                 ("Generate", field(10, field(1, message)) + bytes([5 << 3, 4]), "GenerateRequest.messages.messages.content"),
                 ("SubmitJob", field(1, field(1, bad) + bytes([5 << 3, 4])), "SubmitJobRequest.request.prompt"),
                 ("Score", field(1, bad), "ScoreRequest.text"),
                 ("Tokenize", field(1, bad), "TokenizeRequest.text"),
                 ("GetJob", field(1, bad), "GetJobRequest.job_id")]
        c = Cluster(self.text_model)
        try:
            for method, payload, name in cases:
                stream = method == "Generate"
                call = (c.channel.unary_stream if stream else c.channel.unary_unary)(
                    f"/layerpipe.v1.LayerPipe/{method}", request_serializer=lambda b: b, response_deserializer=lambda b: b)
                with self.assertRaises(grpc.RpcError) as err:
                    list(call(payload, timeout=30)) if stream else call(payload, timeout=30)
                self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, f"{name}: {err.exception.details()}")
                self.assertEqual(err.exception.details(), f"{name} is not valid UTF-8")
            self.assertEqual(len(c.generate([2, 5, 6], 2)), 2)
        finally:
            c.close()

    def test_detokenize_takes_the_models_vocabulary_only(self):
        # The tokenizer knows ids the model does not: Detokenize refuses them as Generate and Score do.
        c = Cluster(self.text_model)
        try:
            self.assertTrue(c.unary("Detokenize", pb.DetokenizeRequest(ids=[2, 511]), pb.DetokenizeResponse))
            with self.assertRaises(grpc.RpcError) as err:
                c.unary("Detokenize", pb.DetokenizeRequest(ids=[2, 512]), pb.DetokenizeResponse)
            self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("outside the vocabulary [0, 512)", err.exception.details())
        finally:
            c.close()

    def test_forged_step_results_are_dropped(self):
        # Plaintext: StepSink shares the client port. Results without the epoch's secret are dropped, so a
        # client spraying forged step errors cannot fail anyone's request.
        c = Cluster(self.model)
        try:
            want = c.generate([2, 5, 6], 24)
            sink = c.channel.unary_unary("/layerpipe.internal.v1.StepSink/StepDone",
                                         request_serializer=wire.StepResult.SerializeToString,
                                         response_deserializer=wire.StepAck.FromString)
            stop = threading.Event()

            def spray():
                for _ in range(200):  # bounded; the generations below take far less
                    if stop.is_set():
                        return
                    for step in range(1, 60):
                        sink(wire.StepResult(epoch=1, step_id=step, stage=1, error="forged", error_code=3), timeout=5)

            sprayer = threading.Thread(target=spray)
            sprayer.start()
            try:
                for _ in range(3):
                    self.assertEqual(c.generate([2, 5, 6], 24), want)
            finally:
                stop.set()
                sprayer.join()
        finally:
            c.close()

    def test_long_prompt_does_not_starve_short_requests(self):
        # 16-token chunks: the 20000-token prompt needs 1250 steps of prefill, seconds even on a fast machine.
        c = Cluster(self.model, coordinator_flags=["--prefill-chunk=16"])
        try:
            job = c.unary("SubmitJob", pb.SubmitJobRequest(request=pb.GenerateRequest(
                ids=pb.TokenIds(ids=[2] + [3 + i % 500 for i in range(20000)]), max_new_tokens=2, stop_ids=[1])),
                pb.SubmitJobResponse)
            time.sleep(0.1)
            short = c.generate([2, 7, 8, 9], 3)
            self.assertEqual(len(short), 3)
            info = c.unary("GetJob", pb.GetJobRequest(job_id=job.job_id), pb.JobInfo)
            self.assertLess(info.prefilled_tokens, info.prompt_tokens,
                            "the short request only finished after the long prefill")
            self.assertIn(info.state, (pb.JOB_PREFILLING, pb.JOB_QUEUED))
        finally:
            c.close()

    def test_hung_worker_ends_requests_with_unavailable(self):
        c = Cluster(self.model, coordinator_flags=["--recovery-deadline=3s", "--health-interval=200ms",
                                                   "--step-timeout=5s"])
        try:
            result = {}

            def run():
                try:
                    result["ids"] = c.generate([2, 5, 6, 7], 100000 // 2, timeout=60)
                except grpc.RpcError as e:
                    result["error"] = e

            t = threading.Thread(target=run)
            t.start()
            time.sleep(1.0)
            c.workers[1][0].send_signal(signal.SIGSTOP)  # hung, not dead
            t.join(60)
            self.assertFalse(t.is_alive())
            self.assertIn("error", result)
            self.assertEqual(result["error"].code(), grpc.StatusCode.UNAVAILABLE)
            self.assertIn("within", result["error"].details())
        finally:
            c.close()


class DrainTest(unittest.TestCase):
    model = None

    @classmethod
    def setUpClass(cls):
        CoordinatorBehaviourTest.setUpClass()
        cls.model = CoordinatorBehaviourTest.model

    def start_generation(self, c, tokens, holding_stage=None):
        """Starts a generation and returns once a stage holds its KV: `holding_stage`, or any."""
        result = {}

        def run():
            try:
                result["ids"] = c.generate([2, 5, 6, 7], tokens, timeout=120)
            except grpc.RpcError as e:
                result["error"] = e

        t = threading.Thread(target=run)
        t.start()
        deadline = time.time() + 30
        held = (lambda used: used[holding_stage] > 0) if holding_stage is not None else any
        while time.time() < deadline and not held(c.kv_used()):
            time.sleep(0.02)
        return t, result

    def test_coordinator_sigterm_finishes_admitted_requests_and_refuses_new_ones(self):
        c = Cluster(self.model)
        try:
            # Long enough that the drain is still running when the second request arrives, even on a
            # fast machine; once the drain ends the server goes away and refusals read differently.
            t, result = self.start_generation(c, 4000)
            c.coordinator.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            with self.assertRaises(grpc.RpcError) as err:
                c.generate([2, 9], 4, timeout=10)
            self.assertTrue(t.is_alive(), "the admitted request ended before the refusal was checked")
            self.assertEqual(err.exception.code(), grpc.StatusCode.UNAVAILABLE)
            t.join(120)
            self.assertNotIn("error", result)
            self.assertEqual(len(result["ids"]), 4000)
            self.assertEqual(c.coordinator.wait(30), 0)
        finally:
            c.close()

    def test_worker_sigterm_lets_its_sequences_finish_then_exits_zero(self):
        c = Cluster(self.model)
        try:
            # A drain lets finish the sequences the stage holds: stage 1 must hold this one already (a
            # worker stopped before the first frame reaches it has nothing to wait for).
            t, result = self.start_generation(c, 400, holding_stage=1)
            worker, address = c.workers[1]
            worker.send_signal(signal.SIGTERM)
            t.join(120)
            self.assertNotIn("error", result)
            self.assertEqual(len(result["ids"]), 400)
            self.assertEqual(worker.wait(30), 0)
            # A replacement on the same address serves the range again.
            c.start([f"{ARGS.bin}/layerpipe-worker", "--listen", address, "--threads", "1"],
                    "replacement-worker").wait_listening(STARTUP_TIMEOUT)
            deadline = time.time() + 30
            while True:
                try:
                    self.assertEqual(len(c.generate([2, 9], 4, timeout=30)), 4)
                    break
                except grpc.RpcError as e:
                    # Until the coordinator notices and re-assigns, it says it is not serving.
                    self.assertEqual(e.code(), grpc.StatusCode.UNAVAILABLE)
                    self.assertLess(time.time(), deadline)
                    time.sleep(0.2)
        finally:
            c.close()


def main():
    global ARGS, pb, wire
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--work", required=True)
    ARGS, rest = ap.parse_known_args()
    os.makedirs(ARGS.work, exist_ok=True)
    pb = load_pb()
    wire = load_internal_pb2(ARGS.src)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
