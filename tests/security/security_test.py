#!/usr/bin/python3
"""Security end to end: two workers and a coordinator on 127.0.0.1, on a small generated checkpoint, with
mutual TLS between them, TLS and bearer tokens on the client port, and a per-client limit of 2. Shows that
the right client gets the tokens of a local run, and that everything else is refused:

- no token, a wrong or malformed token: UNAUTHENTICATED (CLI and raw gRPC, unary and streaming);
- a plaintext client, or one that does not trust the coordinator's CA: no connection (UNAVAILABLE);
- a peer with a certificate from another CA, without a certificate, or in plaintext cannot call a worker's
  Assign or Step, nor the coordinator's StepSink (the TLS handshake is refused), while a peer with a
  cluster certificate can; a coordinator with a rogue certificate cannot take the workers over;
- StepSink is not served on the client port;
- a client's third concurrent RPC gets RESOURCE_EXHAUSTED while other clients still work, and it is let in
  again once one of its streams ends;
- tokens added to or removed from the token file take effect while serving.

  security_test.py --bin build/bin --src . --work DIR
"""

import argparse
import os
import shutil
import subprocess
import sys
import time
import unittest

import grpc

ARGS = None
pb = None

LIMIT = 2
LAYERS = 6
TOKENS = {"alice": "tok-alice-5d0c1e", "bob": "tok-bob-77a1f3", "dave": "tok-dave-0b9e44"}
PROMPT_IDS = [2, 5, 6, 7, 9, 11]
NEW_TOKENS = 8
HANDSHAKE_REFUSED = grpc.StatusCode.UNAVAILABLE


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pb_loader import load_internal_pb2, load_layerpipe_pb2  # noqa: E402
from proc_harness import Process, small_checkpoint_argv  # noqa: E402

STARTUP_TIMEOUT = 120  # seconds for a server to print what it announces


def load_pb():
    return load_layerpipe_pb2(ARGS.src)


def load_wire():
    """The worker and step planes' messages."""
    return load_internal_pb2(ARGS.src)


def pki(name):
    return os.path.join(ARGS.work, "pki", name)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def peer_credentials(cert=None, root="cluster-ca.pem"):
    """Channel credentials of a would-be peer: trusts `root`, presents `cert` (a PKI name) if given."""
    return grpc.ssl_channel_credentials(root_certificates=read(pki(root)),
                                        private_key=read(pki(f"{cert}.key")) if cert else None,
                                        certificate_chain=read(pki(f"{cert}.pem")) if cert else None)


def bearer(name):
    return [("authorization", f"Bearer {TOKENS[name]}")]


def write_tokens(path, tokens):
    """Replaces the token file whole, as a Secret update does."""
    with open(path + ".new", "w") as f:
        f.write("# name:token\n")
        for name, token in tokens.items():
            f.write(f"{name}:{token}\n")
    os.replace(path + ".new", path)


class SecurityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        shutil.rmtree(ARGS.work, ignore_errors=True)
        os.makedirs(ARGS.work)
        subprocess.run(["bash", os.path.join(ARGS.src, "tests/security/make_test_certs.sh"), pki("")], check=True)
        cls.model = os.path.join(ARGS.work, "model")
        # Positions enough for the long streams of the limit test.
        subprocess.run(small_checkpoint_argv(f"{ARGS.bin}/layerpipe", cls.model, seed=9, max_positions=200000,
                                             layers=LAYERS),
                       check=True, stdout=subprocess.DEVNULL)
        cls.tokens_path = os.path.join(ARGS.work, "tokens")
        write_tokens(cls.tokens_path, TOKENS)
        cls.procs = []
        cls.addClassCleanup(lambda: [p.close() for p in cls.procs])

        worker_tls = ["--tls-cert", pki("worker.pem"), "--tls-key", pki("worker.key"),
                      "--tls-ca", pki("cluster-ca.pem")]
        cls.workers = []
        for i in range(2):
            w = cls.start([f"{ARGS.bin}/layerpipe-worker", "--listen", "127.0.0.1:0", "--threads", "1", *worker_tls],
                          f"worker{i}")
            cls.workers.append(w.wait_listening(STARTUP_TIMEOUT))
        c = cls.start([f"{ARGS.bin}/layerpipe-coordinator", "--listen", "127.0.0.1:0", "--model", cls.model,
                       "--workers", ",".join(cls.workers),
                       "--tls-cert", pki("api.pem"), "--tls-key", pki("api.key"),
                       "--peer-listen", "127.0.0.1:0", "--peer-cert", pki("peer.pem"), "--peer-key", pki("peer.key"),
                       "--peer-ca", pki("cluster-ca.pem"),
                       "--auth-tokens", cls.tokens_path, f"--max-concurrent-per-client={LIMIT}",
                       "--admin-clients", "dave"], "coordinator")
        cls.coordinator = c
        cls.peer_address = c.wait_for(r"peer port on (\S+)", STARTUP_TIMEOUT).group(1)
        cls.address = c.wait_listening(STARTUP_TIMEOUT)
        cls.api = grpc.secure_channel(cls.address, grpc.ssl_channel_credentials(read(pki("api-ca.pem"))))

    @classmethod
    def start(cls, argv, name):
        # gRPC logs refused handshakes at ERROR, which the worker test looks for.
        p = Process(argv, name, ARGS.work, env={**os.environ, "GRPC_VERBOSITY": "ERROR"})
        cls.procs.append(p)
        return p

    # -------------------------------------------------------------------------------------------- helpers

    def rpc(self, channel, method, request, response_type, metadata=None, timeout=20):
        call = channel.unary_unary(method, request_serializer=type(request).SerializeToString,
                                   response_deserializer=response_type.FromString)
        return call(request, metadata=metadata, timeout=timeout)

    def status(self, metadata, channel=None):
        return self.rpc(channel or self.api, "/layerpipe.v1.LayerPipe/ClusterStatus", pb.ClusterStatusRequest(),
                        pb.ClusterStatusResponse, metadata)

    def generate_stream(self, metadata, new_tokens, channel=None):
        call = (channel or self.api).unary_stream("/layerpipe.v1.LayerPipe/Generate",
                                                  request_serializer=pb.GenerateRequest.SerializeToString,
                                                  response_deserializer=pb.GenerateResponse.FromString)
        return call(pb.GenerateRequest(ids=pb.TokenIds(ids=PROMPT_IDS), max_new_tokens=new_tokens, stop_ids=[1]),
                    metadata=metadata, timeout=300)

    def generate_ids(self, metadata):
        return [t.id for msg in self.generate_stream(metadata, NEW_TOKENS) for t in msg.tokens]

    def refused(self, code, fn):
        with self.assertRaises(grpc.RpcError) as err:
            fn()
        self.assertEqual(err.exception.code(), code, err.exception.details())
        return err.exception

    def layerpipe(self, *args):
        p = subprocess.run([f"{ARGS.bin}/layerpipe", *args], stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=120)
        return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")

    def remote(self, *args):
        """`layerpipe COMMAND... --coordinator ADDRESS FLAGS...`."""
        words = next((i for i, a in enumerate(args) if a.startswith("--")), len(args))
        return self.layerpipe(*args[:words], "--coordinator", self.address, *args[words:])

    def worker_status(self, address, cert="worker"):
        with grpc.secure_channel(address, peer_credentials(cert)) as ch:
            return self.rpc(ch, "/layerpipe.internal.v1.Worker/Status", load_wire().WorkerStatusRequest(), load_wire().WorkerStatus)

    # ---------------------------------------------------------------------------------------------- tests

    def test_client_with_token_gets_the_local_tokens(self):
        rc, local, err = self.layerpipe("generate", "--model", self.model, "--precision", "bf16", "--threads", "1",
                                        "--ids", ",".join(map(str, PROMPT_IDS)), f"--max-new-tokens={NEW_TOKENS}",
                                        "--stop-ids", "1", "--print-ids")
        self.assertEqual(rc, 0, err)
        want = local.rstrip("\n").rsplit("\n", 1)[-1]
        self.assertRegex(want, r"^\d+(,\d+)*$")
        gen = ["--ids", ",".join(map(str, PROMPT_IDS)), f"--max-new-tokens={NEW_TOKENS}", "--stop-ids", "1",
               "--print-ids", "--tls-ca", pki("api-ca.pem")]
        rc, out, err = self.remote("generate", *gen, "--token", TOKENS["alice"])
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.rstrip("\n").rsplit("\n", 1)[-1], want)
        token_file = os.path.join(ARGS.work, "bob.token")
        with open(token_file, "w") as f:
            f.write(TOKENS["bob"] + "\n")
        rc, out, err = self.remote("generate", *gen, "--token-file", token_file)
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.rstrip("\n").rsplit("\n", 1)[-1], want)
        self.assertEqual(",".join(map(str, self.generate_ids(bearer("bob")))), want)
        rc, out, err = self.remote("job", "list", "--tls-ca", pki("api-ca.pem"), "--token-file", token_file)
        self.assertEqual(rc, 0, err)

    def test_missing_wrong_or_malformed_token_is_unauthenticated(self):
        for metadata in [None, [("authorization", "Bearer tok-nobody")], [("authorization", TOKENS["alice"])],
                         [("authorization", f"Basic {TOKENS['alice']}")], [("x-token", TOKENS["alice"])]]:
            self.refused(grpc.StatusCode.UNAUTHENTICATED, lambda: self.status(metadata))
            self.refused(grpc.StatusCode.UNAUTHENTICATED, lambda: self.generate_ids(metadata))
        gen = ["--ids", "2,5,6", "--max-new-tokens", "2", "--tls-ca", pki("api-ca.pem")]
        for token_args in [[], ["--token", "tok-nobody"]]:
            rc, _, err = self.remote("generate", *gen, *token_args)
            self.assertNotEqual(rc, 0)
            self.assertIn("UNAUTHENTICATED", err)
            rc, _, err = self.remote("job", "list", "--tls-ca", pki("api-ca.pem"), *token_args)
            self.assertIn("UNAUTHENTICATED", err)

    def test_plaintext_or_untrusting_client_gets_no_connection(self):
        with grpc.insecure_channel(self.address) as plain:
            self.refused(grpc.StatusCode.UNAVAILABLE, lambda: self.status(bearer("alice"), plain))
        with grpc.secure_channel(self.address, grpc.ssl_channel_credentials(read(pki("rogue-ca.pem")))) as wrong:
            self.refused(grpc.StatusCode.UNAVAILABLE, lambda: self.status(bearer("alice"), wrong))
        rc, _, err = self.remote("generate", "--ids", "2,5,6", "--max-new-tokens", "2", "--token", TOKENS["alice"])
        self.assertNotEqual(rc, 0)
        self.assertIn("UNAVAILABLE", err)
        self.assertEqual(self.status(bearer("alice")).num_layers, LAYERS)  # the same client with TLS

    def test_workers_refuse_peers_without_a_cluster_certificate(self):
        before = [self.worker_status(w).epoch for w in self.workers]
        log_start = self.procs[0].stderr_size()
        assign = load_wire().AssignRequest(model_dir=self.model, layer_begin=0, layer_end=LAYERS, first=True, last=True,
                                  coordinator_address=self.peer_address, epoch=999, stage=0)
        step = load_wire().StepFrame(epoch=before[0], step_id=1 << 40, slices=[load_wire().StepSlice(seq_id=1 << 50, ids=[2])])
        attempts = {
            "rogue certificate": lambda: grpc.secure_channel(self.workers[0], peer_credentials("rogue")),
            "no certificate": lambda: grpc.secure_channel(self.workers[0], peer_credentials(None)),
            "plaintext": lambda: grpc.insecure_channel(self.workers[0]),
        }
        for what, channel in attempts.items():
            with self.subTest(what), channel() as ch:
                self.refused(HANDSHAKE_REFUSED,
                             lambda: self.rpc(ch, "/layerpipe.internal.v1.Worker/Assign", assign, load_wire().AssignResponse))
                self.refused(HANDSHAKE_REFUSED, lambda: self.rpc(ch, "/layerpipe.internal.v1.Worker/Step", step, load_wire().StepAck))
        # The worker refused them (not the client giving up), and nothing got through: same epochs, and the
        # cluster still serves.
        log = self.procs[0].stderr_text(log_start)
        self.assertIn("certificate verify failed", log)
        self.assertIn("peer did not return a certificate", log)
        self.assertEqual([self.worker_status(w).epoch for w in self.workers], before)
        self.assertEqual(len(self.generate_ids(bearer("alice"))), NEW_TOKENS)

    def test_step_sink_takes_results_only_from_cluster_peers(self):
        stale = load_wire().StepResult(epoch=0, step_id=1)  # from no epoch: ignored when it does arrive
        sink = "/layerpipe.internal.v1.StepSink/StepDone"
        attempts = {"rogue certificate": peer_credentials("rogue"), "no certificate": peer_credentials()}
        for what, creds in attempts.items():
            with self.subTest(what), grpc.secure_channel(self.peer_address, creds) as ch:
                self.refused(HANDSHAKE_REFUSED, lambda: self.rpc(ch, sink, stale, load_wire().StepAck))
        with grpc.insecure_channel(self.peer_address) as ch:
            self.refused(HANDSHAKE_REFUSED, lambda: self.rpc(ch, sink, stale, load_wire().StepAck))
        with grpc.secure_channel(self.peer_address, peer_credentials("worker")) as ch:
            self.rpc(ch, sink, stale, load_wire().StepAck)  # a cluster certificate gets through
        # Not on the client port, even with a valid token.
        self.refused(grpc.StatusCode.UNIMPLEMENTED,
                     lambda: self.rpc(self.api, sink, stale, load_wire().StepAck, bearer("alice")))

    def test_rogue_coordinator_cannot_take_the_workers_over(self):
        before = [self.worker_status(w).epoch for w in self.workers]
        rogue = self.start([f"{ARGS.bin}/layerpipe-coordinator", "--listen", "127.0.0.1:0", "--model", self.model,
                            "--workers", ",".join(self.workers), "--peer-listen", "127.0.0.1:0",
                            "--peer-cert", pki("rogue.pem"), "--peer-key", pki("rogue.key"),
                            "--peer-ca", pki("cluster-ca.pem"), "--startup-timeout=3s"], "rogue-coordinator")
        try:
            rc = rogue.popen.wait(60)
        except subprocess.TimeoutExpired:
            self.fail("the rogue coordinator is still trying")
        self.assertNotEqual(rc, 0)
        self.assertIn("the pipeline did not start", rogue.stderr_text()[-3000:])
        self.assertEqual([self.worker_status(w).epoch for w in self.workers], before)

    def test_jobs_belong_to_the_client_that_submitted_them(self):
        api = "/layerpipe.v1.LayerPipe/"
        submit = pb.SubmitJobRequest(request=pb.GenerateRequest(ids=pb.TokenIds(ids=[2, 5, 6]), max_new_tokens=2))
        job = self.rpc(self.api, api + "SubmitJob", submit, pb.SubmitJobResponse, bearer("alice")).job_id

        def listed(name):
            jobs = self.rpc(self.api, api + "ListJobs", pb.ListJobsRequest(), pb.ListJobsResponse, bearer(name)).jobs
            return [j.job_id for j in jobs]

        get = pb.GetJobRequest(job_id=job)
        self.assertEqual(self.rpc(self.api, api + "GetJob", get, pb.JobInfo, bearer("alice")).job_id, job)
        self.assertIn(job, listed("alice"))
        # Another client neither sees, streams nor cancels it: to bob it does not exist.
        self.assertNotIn(job, listed("bob"))
        self.refused(grpc.StatusCode.NOT_FOUND, lambda: self.rpc(self.api, api + "GetJob", get, pb.JobInfo, bearer("bob")))
        self.refused(grpc.StatusCode.NOT_FOUND, lambda: self.rpc(
            self.api, api + "CancelJob", pb.CancelJobRequest(job_id=job), pb.JobInfo, bearer("bob")))
        stream = self.api.unary_stream(api + "StreamJob", request_serializer=pb.StreamJobRequest.SerializeToString,
                                       response_deserializer=pb.GenerateResponse.FromString)
        self.refused(grpc.StatusCode.NOT_FOUND,
                     lambda: list(stream(pb.StreamJobRequest(job_id=job), metadata=bearer("bob"), timeout=20)))
        # The admin token (--admin-clients) sees every job.
        self.assertIn(job, listed("dave"))
        self.assertEqual(self.rpc(self.api, api + "GetJob", get, pb.JobInfo, bearer("dave")).job_id, job)

    def test_per_client_limit_refuses_the_extra_stream_only(self):
        streams = [self.generate_stream(bearer("alice"), 100000) for _ in range(LIMIT)]
        try:
            for s in streams:
                next(s)  # tokens flowing: the RPC is open
            err = self.refused(grpc.StatusCode.RESOURCE_EXHAUSTED,
                               lambda: next(self.generate_stream(bearer("alice"), 4)))
            self.assertIn("alice", err.details())
            self.refused(grpc.StatusCode.RESOURCE_EXHAUSTED, lambda: self.status(bearer("alice")))
            # Other clients are not held back by alice's limit.
            self.assertEqual(len(self.generate_ids(bearer("bob"))), NEW_TOKENS)
            self.assertEqual(self.status(bearer("dave")).num_layers, LAYERS)
            # Once one of alice's streams ends she is let in again.
            streams[0].cancel()
            deadline = time.monotonic() + 20
            while True:
                try:
                    self.status(bearer("alice"))
                    break
                except grpc.RpcError as e:
                    if e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED or time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
        finally:
            for s in streams:
                s.cancel()

    def test_token_file_changes_apply_while_serving(self):
        carol = [("authorization", "Bearer tok-carol-31f0aa")]
        self.refused(grpc.StatusCode.UNAUTHENTICATED, lambda: self.status(carol))
        tokens = {**TOKENS, "carol": "tok-carol-31f0aa"}
        del tokens["dave"]
        write_tokens(self.tokens_path, tokens)
        try:
            deadline = time.monotonic() + 15
            while True:
                try:
                    self.status(carol)
                    break
                except grpc.RpcError as e:
                    if e.code() != grpc.StatusCode.UNAUTHENTICATED or time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            self.refused(grpc.StatusCode.UNAUTHENTICATED, lambda: self.status(bearer("dave")))
            self.assertEqual(self.status(bearer("alice")).num_layers, LAYERS)
        finally:
            write_tokens(self.tokens_path, TOKENS)


def main():
    global ARGS, pb
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--work", required=True)
    ARGS, rest = ap.parse_known_args()
    ARGS.work = os.path.abspath(ARGS.work)
    pb = load_pb()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
