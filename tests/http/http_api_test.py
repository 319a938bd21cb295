#!/usr/bin/python3
"""The coordinator's OpenAI-compatible HTTP API end to end, over HTTPS with bearer tokens (the gRPC
port's TLS and tokens), on a 2-worker cluster with the real Gemma tokenizer:

- OpenAI's official JavaScript client (npm `openai`) gets, for chat (whole, streamed, with logprobs,
  with a stop string, multi-turn), completions (text, ids, echo, streamed) and seeded sampling, exactly
  what the gRPC API answers for the same request; its refusals surface as the library's error classes;
- curl sees well-formed server-sent events ending in [DONE], and errors in OpenAI's JSON shape;
- a client that disconnects mid-stream frees its KV on every stage; a client over its concurrency
  limit gets 429; a body over the limit 413; jobs are submitted, followed and read over HTTP;
- /health answers 503 once a stage is down.

  http_api_test.py --bin build/bin --src . --work DIR
"""

import argparse
import http.client
import json
import os
import shutil
import socket
import ssl
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
TOKENS = {"alice": "tok-alice-0123456789", "bob": "tok-bob-0123456789"}
LIMIT = 4          # --max-concurrent-per-client
CONTEXT = 2048     # the checkpoint's max positions
NEW = 12           # max_tokens of the compared requests
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]
MULTI = MESSAGES + [{"role": "assistant", "content": "<|channel>thought\nplanning<channel|>General Kenobi"},
                    {"role": "user", "content": "What now?"}]
PROMPT = "The capital of France is"


def pki(name):
    return os.path.join(ARGS.work, "pki", name)


def bearer(name):
    return [("authorization", f"Bearer {TOKENS[name]}")]


class HttpApiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        os.makedirs(ARGS.work, exist_ok=True)
        subprocess.run(["bash", os.path.join(ARGS.src, "tests", "security", "make_test_certs.sh"), pki("")],
                       check=True)
        cls.model = os.path.join(ARGS.work, "model")
        shutil.rmtree(cls.model, ignore_errors=True)
        tokenizer = os.path.join(ARGS.src, "third_party", "npm", "node_modules", "@lenml", "tokenizer-gemma3",
                                 "models", "tokenizer.json")
        # The tiny model of the cluster tests, but with the tokenizer's whole vocabulary: text becomes any id.
        argv = small_checkpoint_argv(f"{ARGS.bin}/layerpipe", cls.model, seed=21, max_positions=CONTEXT)
        del argv[argv.index("--vocab"):argv.index("--vocab") + 2]
        subprocess.run(argv + ["--tokenizer", tokenizer], check=True, stdout=subprocess.DEVNULL)
        tokens_path = os.path.join(ARGS.work, "tokens")
        with open(tokens_path, "w") as f:
            f.writelines(f"{name}:{token}\n" for name, token in TOKENS.items())
        cls.procs = []
        cls.addClassCleanup(lambda: [p.close() for p in cls.procs])
        cls.workers = []
        for i in range(2):
            w = cls.start([f"{ARGS.bin}/layerpipe-worker", "--listen", "127.0.0.1:0", "--threads", "1",
                           "--tls-cert", pki("worker.pem"), "--tls-key", pki("worker.key"),
                           "--tls-ca", pki("cluster-ca.pem")], f"worker{i}")
            cls.workers.append(w)
        addresses = [w.wait_listening(STARTUP_TIMEOUT) for w in cls.workers]
        c = cls.start([f"{ARGS.bin}/layerpipe-coordinator", "--listen", "127.0.0.1:0", "--model", cls.model,
                       "--workers", ",".join(addresses), "--http-listen", "127.0.0.1:0",
                       "--tls-cert", pki("api.pem"), "--tls-key", pki("api.key"),
                       "--peer-listen", "127.0.0.1:0", "--peer-cert", pki("peer.pem"), "--peer-key", pki("peer.key"),
                       "--peer-ca", pki("cluster-ca.pem"),
                       "--auth-tokens", tokens_path, f"--max-concurrent-per-client={LIMIT}"], "coordinator")
        http_address = c.wait_for(r"http port on (\S+)", STARTUP_TIMEOUT).group(1)
        cls.grpc_address = c.wait_listening(STARTUP_TIMEOUT)
        cls.host, port = http_address.rsplit(":", 1)
        cls.port = int(port)
        cls.base_url = f"https://{http_address}/v1"
        cls.tls = ssl.create_default_context(cafile=pki("api-ca.pem"))
        with open(pki("api-ca.pem"), "rb") as f:
            cls.channel = grpc.secure_channel(cls.grpc_address, grpc.ssl_channel_credentials(f.read()))

    @classmethod
    def start(cls, argv, name):
        p = Process(argv, name, ARGS.work)
        cls.procs.append(p)
        return p

    # ------------------------------------------------------------------------------------------- helpers

    def generate(self, **fields):
        """The gRPC API's answer: (text, [TokenInfo], last message)."""
        call = self.channel.unary_stream("/layerpipe.v1.LayerPipe/Generate",
                                         request_serializer=pb.GenerateRequest.SerializeToString,
                                         response_deserializer=pb.GenerateResponse.FromString)
        text, tokens, last = "", [], None
        for msg in call(pb.GenerateRequest(**fields), metadata=bearer("alice"), timeout=120):
            text += msg.text
            tokens += list(msg.tokens)
            last = msg
        return text, tokens, last

    def chat_ref(self, messages, **fields):
        conv = pb.Conversation(messages=[pb.ChatMessage(role=m["role"], content=m["content"]) for m in messages])
        fields.setdefault("sampling", pb.SamplingParams(temperature=0))
        return self.generate(messages=conv, max_new_tokens=NEW, **fields)

    def kv_used(self):
        call = self.channel.unary_unary("/layerpipe.v1.LayerPipe/ClusterStatus",
                                        request_serializer=pb.ClusterStatusRequest.SerializeToString,
                                        response_deserializer=pb.ClusterStatusResponse.FromString)
        # As bob: alice's streams may still count against her limit until the server notices they closed.
        return [s.kv_bytes_used for s in call(pb.ClusterStatusRequest(), metadata=bearer("bob"), timeout=20).stages]

    def wait_kv_free(self, seconds):
        deadline = time.monotonic() + seconds
        while (used := self.kv_used()) != [0, 0]:
            self.assertLess(time.monotonic(), deadline, f"KV still held on the stages: {used}")
            time.sleep(0.1)

    def request(self, method, path, body=None, who="alice", headers=None):
        """(status, parsed JSON or raw text) of one HTTPS call."""
        conn = http.client.HTTPSConnection(self.host, self.port, context=self.tls, timeout=120)
        h = {"Content-Type": "application/json", **(headers or {})}
        if who:
            h["Authorization"] = f"Bearer {TOKENS[who]}"
        conn.request(method, path, body=json.dumps(body) if isinstance(body, (dict, list)) else body, headers=h)
        r = conn.getresponse()
        data = r.read().decode()
        conn.close()
        try:
            return r.status, json.loads(data)
        except json.JSONDecodeError:
            return r.status, data

    def assertOpenAiError(self, status, body, want_status, want_type):
        self.assertEqual(status, want_status, body)
        self.assertEqual(set(body), {"error"}, body)
        self.assertEqual(set(body["error"]), {"message", "type", "param", "code"}, body)
        self.assertEqual(body["error"]["type"], want_type, body)
        self.assertTrue(body["error"]["message"], body)

    def open_stream(self, max_tokens, who="alice"):
        """A raw TLS socket with a streaming chat request under way, its first content chunk read."""
        raw = socket.create_connection((self.host, self.port), timeout=60)
        s = self.tls.wrap_socket(raw, server_hostname=self.host)
        body = json.dumps({"messages": MESSAGES, "max_tokens": max_tokens, "temperature": 0, "stream": True})
        s.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Bearer {TOKENS[who]}"
                   f"\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode())
        seen = b""
        while b'"content":"' not in seen.split(b'"role":"assistant"')[-1]:
            chunk = s.recv(65536)
            self.assertTrue(chunk, f"the stream ended early: {seen!r}")
            seen += chunk
        self.assertIn(b"200 OK", seen.split(b"\r\n")[0])
        return s

    # --------------------------------------------------------------------------------------------- tests

    def test_openai_client_gets_what_grpc_answers(self):
        text, tokens, last = self.chat_ref(MESSAGES)
        self.assertEqual(len(tokens), NEW)
        multi_text, _, multi_last = self.chat_ref(MULTI)
        # A stop string whose first occurrence is inside the answer, not at its start.
        cut = next(p for p in range(1, len(text) - 2) if text.find(text[p:p + 3]) == p)
        stop = text[cut:cut + 3]
        stop_text, _, stop_last = self.chat_ref(MESSAGES, stop=[stop])
        self.assertEqual(stop_text, text[:cut])
        self.assertEqual(stop_last.finish_reason, "stop")
        completion_text, _, _ = self.generate(prompt=PROMPT, max_new_tokens=NEW, sampling=pb.SamplingParams(temperature=0))
        sampled_text, _, _ = self.chat_ref(MESSAGES, sampling=pb.SamplingParams(temperature=1.0, top_p=0.9, seed=7))
        tok_call = self.channel.unary_unary("/layerpipe.v1.LayerPipe/Tokenize",
                                            request_serializer=pb.TokenizeRequest.SerializeToString,
                                            response_deserializer=pb.TokenizeResponse.FromString)
        prompt_ids = list(tok_call(pb.TokenizeRequest(text=PROMPT, add_bos=True), metadata=bearer("alice")).ids)

        config = {"base_url": self.base_url, "api_key": TOKENS["alice"], "model": "model", "max_tokens": NEW,
                  "messages": MESSAGES, "multi_messages": MULTI, "stop_string": stop, "prompt": PROMPT,
                  "prompt_ids": prompt_ids, "context": CONTEXT}
        config_path = os.path.join(ARGS.work, "openai_client.json")
        with open(config_path, "w") as f:
            json.dump(config, f)
        node_modules = subprocess.run(["bash", os.path.join(ARGS.src, "scripts", "fetch_openai_client.sh")],
                                      check=True, capture_output=True, text=True).stdout.strip()
        run = subprocess.run(["node", os.path.join(ARGS.src, "tests", "http", "openai_client.cjs"), node_modules,
                              config_path], capture_output=True, text=True, timeout=600,
                             env={**os.environ, "NODE_EXTRA_CA_CERTS": pki("api-ca.pem")})
        self.assertEqual(run.returncode, 0, run.stderr)
        r = json.loads(run.stdout)
        for name, result in r.items():
            if not name.startswith("err_"):
                self.assertTrue(result["ok"], f"{name}: {result}")
        v = {name: result.get("value") for name, result in r.items()}

        self.assertEqual(v["models"], ["model"])
        usage = {"prompt_tokens": last.usage.prompt_tokens, "completion_tokens": NEW,
                 "total_tokens": last.usage.prompt_tokens + NEW, "prompt_tokens_details": {"cached_tokens": 0}}
        self.assertEqual(v["chat"], {"text": text, "role": "assistant", "finish_reason": "length", "usage": usage,
                                     "object": "chat.completion", "model": "model"})
        stream = v["chat_stream"]
        self.assertEqual((stream["text"], stream["roles"], stream["finish_reason"], stream["usage"]),
                         (text, ["assistant"], "length", usage))
        self.assertGreaterEqual(stream["chunks"], 3)  # role, content..., usage
        self.assertEqual(len(v["chat_logprobs"]), NEW)
        for got, want in zip(v["chat_logprobs"], tokens):
            self.assertAlmostEqual(got["logprob"], want.logprob, places=5)
            self.assertEqual(len(got["top"]), 3)
            self.assertAlmostEqual(got["top"][0], got["logprob"], places=6)  # greedy: the best one
            self.assertEqual(bytes(got["bytes"]).decode(errors="replace"), got["token"])
        self.assertEqual(v["chat_stop"]["text"], text[:cut])
        self.assertEqual(v["chat_stop"]["finish_reason"], "stop")
        self.assertEqual(v["multi_turn"]["text"], multi_text)
        self.assertEqual(v["multi_turn"]["usage"]["prompt_tokens"], multi_last.usage.prompt_tokens)
        self.assertGreater(multi_last.usage.prompt_tokens, last.usage.prompt_tokens)
        a, b, c = v["sampled"]
        self.assertEqual(a, b)
        self.assertEqual(a, sampled_text)
        self.assertNotEqual(a, c)
        self.assertEqual(v["completion"]["text"], completion_text)
        self.assertEqual(v["completion"]["object"], "text_completion")
        self.assertEqual(v["completion"]["usage"]["prompt_tokens"], len(prompt_ids))
        self.assertEqual(v["completion_echo"], PROMPT + completion_text)
        self.assertEqual(v["completion_stream"]["text"], completion_text)
        self.assertEqual(v["completion_ids"], completion_text)

        def refused(name, cls, status, message=None, code=None):
            e = r[name]
            self.assertFalse(e["ok"], f"{name}: {e}")
            self.assertEqual((e["class"], e["status"]), (cls, status), f"{name}: {e}")
            if message:
                self.assertIn(message, e["message"], name)
            if code:
                self.assertEqual(e["code"], code, name)

        refused("err_model", "NotFoundError", 404, "no-such-model", "model_not_found")
        refused("err_max_tokens", "BadRequestError", 400, "max_tokens")
        refused("err_n", "BadRequestError", 400, "n: only 1")
        refused("err_too_long", "BadRequestError", 400, "exceeds the model's context", "context_length_exceeded")
        refused("err_role", "BadRequestError", 400, 'unknown role "tool"')
        refused("err_auth", "AuthenticationError", 401)
        refused("err_auth_stream", "AuthenticationError", 401)

    def test_curl_sees_server_sent_events_and_json_errors(self):
        text, _, _ = self.chat_ref(MESSAGES)
        curl = ["curl", "-sS", "-N", "--cacert", pki("api-ca.pem"), "-H", "Content-Type: application/json"]
        auth = ["-H", f"Authorization: Bearer {TOKENS['alice']}"]
        body = json.dumps({"messages": MESSAGES, "max_tokens": NEW, "temperature": 0, "stream": True})
        out = subprocess.run(curl + auth + ["-d", body, f"{self.base_url}/chat/completions"], check=True,
                             capture_output=True, text=True, timeout=120).stdout
        events = [line for line in out.split("\n") if line]
        self.assertTrue(all(e.startswith("data: ") for e in events), out)
        self.assertEqual(events[-1], "data: [DONE]")
        chunks = [json.loads(e[len("data: "):]) for e in events[:-1]]
        self.assertEqual({c["object"] for c in chunks}, {"chat.completion.chunk"})
        self.assertEqual(len({c["id"] for c in chunks}), 1)
        self.assertEqual("".join(c["choices"][0]["delta"].get("content", "") for c in chunks), text)
        self.assertEqual(chunks[-1]["choices"][0]["finish_reason"], "length")
        # Refusals: status and OpenAI's error JSON.
        for args, status, kind in [([], 401, "authentication_error"),
                                   (auth + ["-d", "{not json"], 400, "invalid_request_error"),
                                   (auth + ["-d", json.dumps({"messages": "hi"})], 400, "invalid_request_error")]:
            got = subprocess.run(curl + args + ["-w", "\n%{http_code}", f"{self.base_url}/chat/completions"]
                                 + ([] if args else ["-d", body]), capture_output=True, text=True, timeout=60).stdout
            payload, code = got.rsplit("\n", 1)
            self.assertOpenAiError(int(code), json.loads(payload), status, kind)
        health = subprocess.run(curl + [f"https://{self.host}:{self.port}/health"], capture_output=True, text=True,
                                timeout=60).stdout
        self.assertEqual(json.loads(health)["status"], "ok")

    def test_images_and_audio_in_chat_parts(self):
        """image_url (data: URL) and input_audio parts give what the gRPC API gives for the same files as
        content parts; other URLs and unmatched placeholders are 400s."""
        import base64
        import io
        import wave
        from PIL import Image  # Debian's python3-pil
        png = io.BytesIO()
        Image.frombytes("RGB", (64, 40), bytes((i * 7) % 256 for i in range(64 * 40 * 3))).save(png, "PNG")
        wav = io.BytesIO()
        with wave.open(wav, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(16000)
            w.writeframes(bytes((i * 13) % 256 for i in range(2 * 9000)))
        png, wav = png.getvalue(), wav.getvalue()
        parts = [{"type": "text", "text": "What is this?"},
                 {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()}},
                 {"type": "input_audio", "input_audio": {"data": base64.b64encode(wav).decode(), "format": "wav"}}]
        status, body = self.request("POST", "/v1/chat/completions",
                                    {"messages": [{"role": "user", "content": parts}], "max_tokens": NEW,
                                     "temperature": 0})
        self.assertEqual(status, 200, body)
        conv = pb.Conversation(messages=[pb.ChatMessage(role="user", parts=[
            pb.ContentPart(text="What is this?"), pb.ContentPart(image=png), pb.ContentPart(audio=wav)])])
        text, tokens, last = self.generate(messages=conv, max_new_tokens=NEW, sampling=pb.SamplingParams(temperature=0))
        self.assertEqual(body["choices"][0]["message"]["content"], text)
        # The image (64x40, resized to 1008x624: 21 x 13 = 273 blocks) and 9000 samples (15 frames) are in the
        # prompt with their framing ids, and the template's "\n\n" around the image.
        self.assertEqual(body["usage"]["prompt_tokens"], last.usage.prompt_tokens)
        status, plain = self.request("POST", "/v1/chat/completions",
                                     {"messages": [{"role": "user", "content": "What is this?"}], "max_tokens": 1})
        extra = body["usage"]["prompt_tokens"] - plain["usage"]["prompt_tokens"]
        self.assertTrue(273 + 2 + 15 + 2 <= extra <= 273 + 2 + 15 + 2 + 4, extra)
        status, err = self.request("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}], "max_tokens": 2})
        self.assertOpenAiError(status, err, 400, "invalid_request_error")
        self.assertIn("data: URL", err["error"]["message"])
        status, err = self.request("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": [
            {"type": "text", "text": "two <|image|> here"}, parts[1]]}], "max_tokens": 2})
        self.assertOpenAiError(status, err, 400, "invalid_request_error")
        self.assertIn("placeholders for 1 image", err["error"]["message"])
        status, err = self.request("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(b"GIF89a..").decode()}}]}],
            "max_tokens": 2})
        self.assertOpenAiError(status, err, 400, "invalid_request_error")
        self.assertIn("attachments[0]", err["error"]["message"])

    def test_other_refusals_are_openai_errors(self):
        status, body = self.request("GET", "/v1/no-such-route")
        self.assertOpenAiError(status, body, 404, "invalid_request_error")
        status, body = self.request("POST", "/v1/chat/completions",
                                    {"messages": MESSAGES, "tools": [{"type": "function"}]})
        self.assertOpenAiError(status, body, 400, "invalid_request_error")
        self.assertIn("tools", body["error"]["message"])
        status, body = self.request("POST", "/v1/completions", {"prompt": "x" * (CONTEXT * 200), "max_tokens": 1})
        self.assertOpenAiError(status, body, 400, "invalid_request_error")
        self.assertEqual(body["error"]["code"], "context_length_exceeded")
        # A body over the limit is refused from its Content-Length, before it is read.
        conn = http.client.HTTPSConnection(self.host, self.port, context=self.tls, timeout=60)
        conn.putrequest("POST", "/v1/completions")
        conn.putheader("Authorization", f"Bearer {TOKENS['alice']}")
        conn.putheader("Content-Length", str(1 << 30))
        conn.endheaders()
        r = conn.getresponse()
        self.assertOpenAiError(r.status, json.loads(r.read()), 413, "invalid_request_error")
        conn.close()
        # The server still serves.
        status, body = self.request("POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 2, "temperature": 0})
        self.assertEqual(status, 200, body)

    def test_a_repeated_long_prompt_reports_its_cached_tokens(self):
        # Token ids (taken as they are), long enough for two 256-token cuts; the last prompt token is always
        # computed, so the second request takes 512 of its 600 tokens from the prefix cache.
        prompt = [3 + (i * 7919) % 200000 for i in range(600)]
        answers = []
        for _ in range(2):
            status, body = self.request("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 3, "temperature": 0})
            self.assertEqual(status, 200, body)
            answers.append(body)
        self.assertEqual([a["usage"]["prompt_tokens_details"]["cached_tokens"] for a in answers], [0, 512])
        self.assertEqual(answers[0]["choices"][0]["text"], answers[1]["choices"][0]["text"])

    def test_disconnect_mid_stream_frees_kv_on_every_stage(self):
        s = self.open_stream(CONTEXT - 100)  # minutes of decoding if it were not cancelled
        self.assertNotEqual(self.kv_used(), [0, 0])
        s.close()
        self.wait_kv_free(5)

    def test_client_over_its_limit_gets_429(self):
        held = [self.open_stream(CONTEXT - 100) for _ in range(LIMIT)]
        try:
            status, body = self.request("POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 2})
            self.assertOpenAiError(status, body, 429, "rate_limit_error")
            status, body = self.request("POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 2}, who="bob")
            self.assertEqual(status, 200, body)  # another client is not held up
        finally:
            for s in held:
                s.close()
        self.wait_kv_free(10)

    def test_jobs_over_http(self):
        text, _, _ = self.chat_ref(MESSAGES)
        status, job = self.request("POST", "/v1/jobs", {"messages": MESSAGES, "max_tokens": NEW, "temperature": 0})
        self.assertEqual(status, 200, job)
        self.assertTrue(job["id"].startswith("job-"))
        conn = http.client.HTTPSConnection(self.host, self.port, context=self.tls, timeout=120)
        conn.request("GET", f"/v1/jobs/{job['id']}/stream?offset=0", headers={"Authorization": f"Bearer {TOKENS['alice']}"})
        r = conn.getresponse()
        self.assertEqual(r.status, 200)
        events = [line[len("data: "):] for line in r.read().decode().split("\n") if line.startswith("data: ")]
        conn.close()
        self.assertEqual(events[-1], "[DONE]")
        parts = [json.loads(e) for e in events[:-1]]
        self.assertEqual("".join(p["text"] for p in parts), text)
        self.assertEqual(sum(len(p["token_ids"]) for p in parts), NEW)
        self.assertEqual(parts[-1]["finish_reason"], "length")
        status, info = self.request("GET", f"/v1/jobs/{job['id']}")
        self.assertEqual((status, info["state"], info["text"], len(info["token_ids"])), (200, "succeeded", text, NEW))
        status, listing = self.request("GET", "/v1/jobs")
        self.assertIn(job["id"], [j["id"] for j in listing["data"]])
        # Newest first, a page at a time; a token is good for its own filter only.
        status, newer = self.request("POST", "/v1/jobs", {"prompt": "Hi", "max_tokens": 2})
        self.assertEqual(status, 200, newer)
        deadline = time.monotonic() + 60
        while self.request("GET", f"/v1/jobs/{newer['id']}")[1]["state"] != "succeeded":
            self.assertLess(time.monotonic(), deadline, "the second job never succeeded")
            time.sleep(0.05)
        status, first = self.request("GET", "/v1/jobs?page_size=1&state=succeeded")
        self.assertEqual((status, first["object"], [j["id"] for j in first["data"]], first["has_more"]),
                         (200, "list", [newer["id"]], True), first)
        token = first["next_page_token"]
        status, second = self.request("GET", f"/v1/jobs?page_size=1&state=succeeded&page_token={token}")
        self.assertEqual((status, [j["id"] for j in second["data"]]), (200, [job["id"]]), second)
        status, body = self.request("GET", f"/v1/jobs?page_size=1&page_token={token}")
        self.assertOpenAiError(status, body, 400, "invalid_request_error")
        self.assertEqual(body["error"]["param"], "page_token")
        for query, param in [("state=done", "state"), ("page_size=x", "page_size"), ("page_size=-2", "page_size"),
                             ("page_token=zzz", "page_token")]:
            status, body = self.request("GET", f"/v1/jobs?{query}")
            self.assertOpenAiError(status, body, 400, "invalid_request_error")
            self.assertEqual(body["error"]["param"], param, query)
        # Another client's job is as unknown as no job at all; an offset past the end is refused.
        for who, path in [("bob", f"/v1/jobs/{job['id']}"), ("alice", "/v1/jobs/job-0000")]:
            status, body = self.request("GET", path, who=who)
            self.assertOpenAiError(status, body, 404, "invalid_request_error")
        status, body = self.request("GET", f"/v1/jobs/{job['id']}/stream?offset={NEW + 1}")
        self.assertOpenAiError(status, body, 400, "invalid_request_error")
        self.assertEqual(body["error"]["param"], "offset")
        # A cancelled job says so.
        status, long_job = self.request("POST", "/v1/jobs", {"prompt": PROMPT, "max_tokens": CONTEXT - 100})
        status, info = self.request("POST", f"/v1/jobs/{long_job['id']}/cancel")
        self.assertEqual(status, 200, info)
        deadline = time.monotonic() + 10
        while info["state"] != "cancelled":
            self.assertLess(time.monotonic(), deadline, info)
            time.sleep(0.1)
            _, info = self.request("GET", f"/v1/jobs/{long_job['id']}")
        self.wait_kv_free(10)

    def test_zz_health_is_503_once_a_stage_is_down(self):
        # Last (by name): it kills a worker.
        self.assertEqual(self.request("GET", "/health", who=None)[0], 200)
        self.workers[1].kill_group()
        deadline = time.monotonic() + 15
        while (got := self.request("GET", "/health", who=None))[0] != 503:
            self.assertLess(time.monotonic(), deadline, got)
            time.sleep(0.2)
        self.assertEqual(got[1], {"status": "unavailable"})


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
