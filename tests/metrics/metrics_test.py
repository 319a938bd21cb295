#!/usr/bin/python3
"""The /metrics endpoints of a real cluster: two workers and a coordinator started with
--metrics-listen 127.0.0.1:0 on a small generated checkpoint serve the Prometheus text format, and
after a few `layerpipe generate --coordinator` runs their counters agree with what was generated.

  metrics_test.py --bin build/bin --work DIR
"""

import argparse
import math
import os
import re
import shutil
import subprocess
import sys
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from proc_harness import Process, small_checkpoint_argv  # noqa: E402

ARGS = None
STARTUP_TIMEOUT = 60

# One sample line of the text format: name, optional {labels}, value.
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)')


def parse_exposition(text):
    """{(name, frozenset(labels)): value} and {name: type}; fails on anything malformed."""
    samples, types, helps = {}, {}, set()
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helps.add(line.split(" ", 3)[2])
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in ("counter", "gauge", "histogram"), line
            types[name] = kind
            continue
        m = SAMPLE.match(line)
        assert m, f"malformed sample line {line!r}"
        name, labels_text, value = m.groups()
        labels = {}
        if labels_text:
            pos = 0
            while pos < len(labels_text):
                lm = LABEL.match(labels_text, pos)
                assert lm, f"malformed labels in {line!r}"
                labels[lm.group(1)] = lm.group(2)
                pos = lm.end()
        family = re.sub(r"_(bucket|sum|count)$", "", name) if name not in types else name
        assert family in types, f"sample {name} has no TYPE line"
        assert family in helps, f"sample {name} has no HELP line"
        key = (name, frozenset(labels.items()))
        assert key not in samples, f"duplicate sample {line!r}"
        samples[key] = float(value)
    return samples, types


class Scrape:
    def __init__(self, text):
        self.text = text
        self.samples, self.types = parse_exposition(text)

    def value(self, name, **labels):
        key = (name, frozenset(labels.items()))
        if key not in self.samples:
            raise AssertionError(f"no sample {name}{labels} in\n{self.text}")
        return self.samples[key]

    def sum(self, name, **labels):
        """Sum over every series of `name` whose labels include `labels`."""
        want = set(labels.items())
        return sum(v for (n, ls), v in self.samples.items() if n == name and want <= ls)


def scrape(port, path="/metrics"):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4"), resp.headers["Content-Type"]
        return Scrape(resp.read().decode())


class Server(Process):
    """A layerpipe server process: its "listening on" address from stdout, its metrics port from stderr."""

    def __init__(self, argv, what):
        super().__init__(argv, what, ARGS.work)
        try:
            self.address = self.wait_listening(STARTUP_TIMEOUT)
            # The metrics line is written before the listening line, so it is there (or never will be).
            self.metrics_port = int(self.wait_stderr(r"metrics on http://[^\s/]+:(\d+)/metrics", 10).group(1))
        except BaseException:
            self.close()  # not in the test's list yet, so tearDown would not stop it
            raise


class MetricsEndToEndTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        shutil.rmtree(ARGS.work, ignore_errors=True)
        os.makedirs(ARGS.work)
        cls.model = os.path.join(ARGS.work, "model")
        # 6 layers, full attention at 2 and 5, a window of 8 shorter than the prompts: both kinds of KV.
        subprocess.run(small_checkpoint_argv(f"{ARGS.bin}/layerpipe", cls.model, seed=7, max_positions=200000),
                       check=True, stdout=subprocess.DEVNULL)

    def setUp(self):
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            s.close()

    def start(self, argv, what):
        s = Server(argv, what)
        self.servers.append(s)
        return s

    def generate(self, coordinator, ids, new_tokens):
        p = subprocess.run([f"{ARGS.bin}/layerpipe", "generate", "--coordinator", coordinator.address,
                            "--ids", ",".join(map(str, ids)), "--max-new-tokens", str(new_tokens), "--print-ids"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr.decode(errors="replace"))
        last = p.stdout.decode().strip().splitlines()[-1]
        return [int(x) for x in last.split(",") if x]

    def test_prefix_cache_counts(self):
        """A 600-token prompt asked twice: one miss, then one hit of 512 cached tokens; each stage keeps the
        prefix, and the bytes its worker measures on its caches equal what the coordinator counts for it."""
        workers = [self.start([f"{ARGS.bin}/layerpipe-worker", "--listen", "127.0.0.1:0", "--threads", "1",
                               "--metrics-listen", "127.0.0.1:0"], f"worker {i}") for i in range(2)]
        coordinator = self.start([f"{ARGS.bin}/layerpipe-coordinator", "--listen", "127.0.0.1:0", "--model", self.model,
                                  "--workers", ",".join(w.address for w in workers), "--metrics-listen", "127.0.0.1:0"],
                                 "coordinator")
        prompt = [2] + [3 + (i * 37) % 500 for i in range(599)]  # the checkpoint has 512 ids
        self.assertEqual(self.generate(coordinator, prompt, 4), self.generate(coordinator, prompt, 4))
        c = scrape(coordinator.metrics_port)
        self.assertEqual(c.value("layerpipe_prefix_cache_lookups_total", result="miss"), 1)
        self.assertEqual(c.value("layerpipe_prefix_cache_lookups_total", result="hit"), 1)
        self.assertEqual(c.value("layerpipe_prefix_cache_cached_tokens_total"), 512)
        self.assertEqual(c.value("layerpipe_prefix_cache_entries"), 1)
        self.assertEqual(c.value("layerpipe_prefix_cache_evictions_total"), 0)
        for s, w in enumerate(workers):
            deadline = time.time() + 30
            while True:  # until the step that releases the last sequence has run
                m = scrape(w.metrics_port)
                if m.value("layerpipe_worker_sequences") == 0 or time.time() > deadline:
                    break
                time.sleep(0.05)
            kept = m.value("layerpipe_worker_prefix_cache_bytes")
            self.assertGreater(kept, 0)
            self.assertEqual(kept, c.value("layerpipe_prefix_cache_bytes", stage=str(s)))
            self.assertEqual(m.value("layerpipe_worker_prefix_cache_entries"), 1)
            self.assertEqual(m.value("layerpipe_worker_prefix_cache_self_evictions_total"), 0)
            self.assertEqual(m.value("layerpipe_worker_prefix_cache_budget_bytes"),
                             m.value("layerpipe_worker_kv_bytes_capacity") // 2)
            self.assertEqual(m.value("layerpipe_worker_kv_bytes_free") + kept,
                             m.value("layerpipe_worker_kv_bytes_capacity"))

    def test_counters_follow_the_requests(self):
        workers = [self.start([f"{ARGS.bin}/layerpipe-worker", "--listen", "127.0.0.1:0", "--threads", "1",
                               "--metrics-listen", "127.0.0.1:0"], f"worker {i}") for i in range(2)]
        coordinator = self.start([f"{ARGS.bin}/layerpipe-coordinator", "--listen", "127.0.0.1:0", "--model", self.model,
                                  "--workers", ",".join(w.address for w in workers), "--health-interval", "100ms",
                                  "--metrics-listen", "127.0.0.1:0"], "coordinator")
        ports = [coordinator.metrics_port] + [w.metrics_port for w in workers]
        self.assertEqual(len(set(ports)), 3, ports)

        before = scrape(coordinator.metrics_port)
        self.assertEqual(before.value("layerpipe_ready"), 1)
        self.assertEqual(before.value("layerpipe_generated_tokens_total"), 0)
        self.assertEqual(before.value("layerpipe_requests_total", kind="generate", code="OK"), 0)
        self.assertEqual(before.types["layerpipe_time_to_first_token_seconds"], "histogram")

        prompts = [[2, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20], [2, 30, 31], [2] + list(range(40, 70))]
        generated = [self.generate(coordinator, ids, 8) for ids in prompts]
        tokens = sum(len(g) for g in generated)
        self.assertGreater(tokens, 0)

        c = scrape(coordinator.metrics_port)
        self.assertEqual(c.value("layerpipe_generated_tokens_total"), tokens)
        self.assertEqual(c.value("layerpipe_prompt_tokens_total"), sum(len(p) for p in prompts))
        self.assertEqual(c.value("layerpipe_requests_total", kind="generate", code="OK"), len(prompts))
        self.assertEqual(c.sum("layerpipe_requests_total"), len(prompts))
        # One first token per request; every later token is one inter-token gap.
        self.assertEqual(c.value("layerpipe_time_to_first_token_seconds_count"), len(prompts))
        self.assertEqual(c.value("layerpipe_time_to_first_token_seconds_bucket", le="+Inf"), len(prompts))
        self.assertGreater(c.value("layerpipe_time_to_first_token_seconds_sum"), 0)
        self.assertEqual(c.value("layerpipe_inter_token_latency_seconds_count"), tokens - len(prompts))
        self.assertEqual(c.value("layerpipe_request_duration_seconds_count", kind="generate"), len(prompts))
        self.assertEqual(c.value("layerpipe_queue_wait_seconds_count"), len(prompts))
        # Buckets are cumulative.
        buckets = sorted(((float(dict(ls)["le"]), v) for (n, ls), v in c.samples.items()
                          if n == "layerpipe_time_to_first_token_seconds_bucket"))
        self.assertEqual([v for _, v in buckets], sorted(v for _, v in buckets))
        self.assertTrue(math.isinf(buckets[-1][0]))
        self.assertGreater(c.value("layerpipe_tokens_per_second"), 0)
        self.assertEqual(c.value("layerpipe_queue_depth"), 0)
        self.assertEqual(c.value("layerpipe_running_sequences"), 0)
        self.assertEqual(c.value("layerpipe_recoveries_total"), 0)
        for s, w in enumerate(workers):
            self.assertEqual(c.value("layerpipe_stage_info", stage=str(s), address=w.address,
                                     first_layer=str(3 * s), last_layer=str(3 * s + 2)), 1)

        steps = []
        for s, w in enumerate(workers):
            m = scrape(w.metrics_port)
            self.assertEqual(m.value("layerpipe_worker_stage"), s)
            steps.append(m.value("layerpipe_worker_steps_total"))
            self.assertGreater(steps[-1], 0)
            self.assertGreater(m.value("layerpipe_worker_compute_seconds_total"), 0)
            self.assertEqual(m.value("layerpipe_worker_step_seconds_count"), steps[-1])
            self.assertGreater(m.value("layerpipe_worker_idle_seconds_total"), 0)
            self.assertGreater(m.value("layerpipe_worker_transfer_seconds_total"), 0)
            self.assertEqual(m.types["layerpipe_worker_idle_seconds_total"], "counter")
            self.assertGreater(m.value("layerpipe_worker_kv_bytes_capacity"), 0)

        # The requests are over: once the last release step has run, no KV is held anywhere.
        deadline = time.time() + 30
        while True:
            ms = [scrape(w.metrics_port) for w in workers]
            used = [m.value("layerpipe_worker_kv_bytes_used", kind=k) for m in ms for k in ("sliding", "full")]
            if not any(used) or time.time() > deadline:
                break
            time.sleep(0.1)
        self.assertEqual(used, [0, 0, 0, 0])
        # Every step went through both stages, the last one (releasing the sequences) included.
        self.assertEqual(ms[0].value("layerpipe_worker_steps_total"), ms[1].value("layerpipe_worker_steps_total"))
        self.assertGreaterEqual(ms[0].value("layerpipe_worker_steps_total"), steps[0])
        for m in ms:
            self.assertEqual(m.value("layerpipe_worker_sequences"), 0)
            self.assertEqual(m.value("layerpipe_worker_kv_bytes_free"), m.value("layerpipe_worker_kv_bytes_capacity"))
        # The coordinator's view from its health probes (every 100 ms) agrees once a probe has seen the
        # stages after the requests.
        deadline = time.time() + 10
        while True:
            c = scrape(coordinator.metrics_port)
            stages = [(c.value("layerpipe_stage_up", stage=str(s)),
                       c.value("layerpipe_stage_kv_bytes_used", stage=str(s)),
                       c.value("layerpipe_stage_compute_seconds_total", stage=str(s)) > 0) for s in range(2)]
            if stages == [(1, 0, True)] * 2 or time.time() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(stages, [(1, 0, True)] * 2)
        for s in range(2):
            self.assertEqual(c.value("layerpipe_stage_kv_bytes_free", stage=str(s)),
                             ms[s].value("layerpipe_worker_kv_bytes_capacity"))

        # Every server exports its version and its process's resources.
        version = subprocess.run([f"{ARGS.bin}/layerpipe-worker", "--version"], stdout=subprocess.PIPE,
                                 check=True).stdout.decode().split()[1]
        for m in [c] + ms:
            self.assertEqual(m.value("layerpipe_build_info", version=version), 1)
            self.assertGreater(m.value("process_resident_memory_bytes"), 1 << 20)
            self.assertGreaterEqual(m.value("process_virtual_memory_bytes"), m.value("process_resident_memory_bytes"))
            self.assertGreater(m.value("process_cpu_seconds_total"), 0)
            self.assertEqual(m.types["process_cpu_seconds_total"], "counter")
            self.assertGreaterEqual(m.value("process_open_fds"), 3)
            self.assertGreaterEqual(m.value("process_max_fds"), m.value("process_open_fds"))
            self.assertLess(abs(m.value("process_start_time_seconds") - time.time()), 3600)
        # Nothing was refused, and every reason shows from the start.
        for reason in ("unauthenticated", "rate_limited", "resource_exhausted", "invalid", "too_long", "not_found",
                       "unavailable", "other"):
            self.assertEqual(c.value("layerpipe_requests_refused_total", reason=reason), 0)

        # Any other path is 404; the endpoint keeps serving after it.
        for port in ports:
            with self.assertRaises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=10)
            self.assertEqual(err.exception.code, 404)
            scrape(port)

    def test_kv_in_use_while_a_sequence_runs(self):
        """Both kinds of KV show while a long generation holds its sequence, and go back to 0 after."""
        workers = [self.start([f"{ARGS.bin}/layerpipe-worker", "--listen", "127.0.0.1:0", "--threads", "1",
                               "--metrics-listen", "127.0.0.1:0"], f"worker {i}") for i in range(2)]
        coordinator = self.start([f"{ARGS.bin}/layerpipe-coordinator", "--listen", "127.0.0.1:0", "--model", self.model,
                                  "--workers", ",".join(w.address for w in workers),
                                  "--metrics-listen", "127.0.0.1:0"], "coordinator")
        client = subprocess.Popen([f"{ARGS.bin}/layerpipe", "job", "submit", "--coordinator", coordinator.address,
                                   "--ids", "2," + ",".join(map(str, range(3, 40))), "--max-new-tokens", "100000",
                                   "--stop-ids", "100000"],  # beyond the vocabulary: never sampled
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = client.communicate(timeout=60)
        self.assertEqual(client.returncode, 0, err.decode(errors="replace"))
        job = out.decode().split()[-1]
        seen = {}
        deadline = time.time() + 30
        while time.time() < deadline and not (seen.get("sliding") and seen.get("full")):
            m = scrape(workers[0].metrics_port)
            for kind in ("sliding", "full"):
                seen[kind] = m.value("layerpipe_worker_kv_bytes_used", kind=kind)
            time.sleep(0.05)
        self.assertGreater(seen["sliding"], 0)
        self.assertGreater(seen["full"], 0)
        self.assertEqual(m.value("layerpipe_worker_sequences"), 1)
        self.assertLess(m.value("layerpipe_worker_kv_bytes_free"), m.value("layerpipe_worker_kv_bytes_capacity"))
        c = scrape(coordinator.metrics_port)
        self.assertEqual(c.value("layerpipe_running_sequences"), 1)

        subprocess.run([f"{ARGS.bin}/layerpipe", "job", "cancel", "--coordinator", coordinator.address,
                        "--job", job], check=True, stdout=subprocess.DEVNULL, timeout=60)
        deadline = time.time() + 30
        while time.time() < deadline:
            m = scrape(workers[0].metrics_port)
            if m.sum("layerpipe_worker_kv_bytes_used") == 0:
                break
            time.sleep(0.05)
        self.assertEqual(m.sum("layerpipe_worker_kv_bytes_used"), 0)
        c = scrape(coordinator.metrics_port)
        self.assertEqual(c.value("layerpipe_requests_total", kind="generate", code="CANCELLED"), 1)


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ARGS, rest = ap.parse_known_args()
    ARGS.bin = os.path.abspath(ARGS.bin)
    ARGS.work = os.path.abspath(ARGS.work)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
