#!/usr/bin/env python3
"""kuiper_server end to end, driven by the real `openai` client (PyPI) on 127.0.0.1.

With the bundled stories260K:
  models, health     GET /v1/models lists the model; an unknown model is a 404
  completions        greedy text, finish reason and token counts equal to `llama_infer --temp 0`
                     on the same prompt and length (both end a story at the model's end/BOS
                     tokens), streamed and not; a stop string cuts llama_infer's text before it
  chat               greedy reply equal to `llama_chat --temp 0` (scripted) for the same message,
                     streamed and not; a repeated prompt is served from the prefix cache
  16 streams         16 concurrent streams, different prompts and lengths, each equal to
                     llama_infer's
  64 connections     opened at once, every handshake completes within half a second (none
                     dropped by a full listen backlog and retried a second later)
  hostile requests   bad JSON, a 10 MB body, negative and huge max_tokens, invalid UTF-8, a
                     prompt longer than the context, n=2, a wrong and a missing key: each gets its
                     error object while 4 streams run, and those streams stay equal to llama_infer
With a slower random-weight model (scripts/make_random_llama2c.py, 2048 context):
  disconnect         a client that closes a long stream early: its request is cancelled (metrics
                     count it, nothing runs, its KV blocks are free again) long before it could
                     have finished
  queued and gone    a stream still queued whose client leaves is cancelled before it runs
  queue full         --max-seqs 1 --max-waiting 1: a third request gets 429
  shutdown           SIGTERM while a stream runs: the stream ends with an error event, the server
                     exits 0

And bad start-up flags (missing model, bad port, a port in use): one error line, exit 1 or 2.

Every request has a timeout; every loop is bounded. Usage:
  server_openai_test.py --server kuiper_server --infer llama_infer --chat llama_chat \
      --source-dir . --work-dir build/server_test
"""
import argparse
import http.client
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

os.environ["NO_PROXY"] = "127.0.0.1,localhost"  # the client must never leave this machine
os.environ["no_proxy"] = "127.0.0.1,localhost"
import openai  # noqa: E402

ARGS = None
API_KEY = "test-key"
STORY_PROMPTS = [
    "Once upon a time", "One day, a little cat", "Lily and Ben went to the park", "The sun was hot",
    "Tom had a red ball", "There was a big tree", "Sue liked to sing", "A small bird flew",
    "The dog was sad", "Mom made a cake", "Tim found a box", "It was a rainy day",
    "The girl saw a frog", "Max wanted to play", "In the forest", "The boat was blue",
]
REQUEST_TIMEOUT = 120  # seconds, for any one request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A kuiper_server process on a free loopback port, stopped with SIGTERM."""

    def __init__(self, *flags):
        self.port = free_port()
        self.log = open(os.path.join(ARGS.work_dir, f"server_{self.port}.log"), "w+")
        self.process = subprocess.Popen([ARGS.server, "--port", str(self.port), "--api-key", API_KEY, *flags],
                                        stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"kuiper_server exited with {self.process.returncode}: {self.output()}")
            try:
                if self.get("/health")[0] == 200:
                    break
            except OSError:
                time.sleep(0.1)
        else:
            raise AssertionError("kuiper_server did not answer /health within 60 s")
        self.client = openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key=API_KEY,
                                    timeout=REQUEST_TIMEOUT, max_retries=0)

    def output(self):
        self.log.seek(0)
        return self.log.read()

    def request(self, method, path, body=None, headers=None):
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=REQUEST_TIMEOUT)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def get(self, path):
        return self.request("GET", path)

    def post(self, path, body, key=API_KEY):
        headers = {"Content-Type": "application/json"}
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        return self.request("POST", path, body, headers)

    def metrics(self):
        status, body = self.get("/metrics")
        assert status == 200, status
        return {m.group(1): float(m.group(2)) for m in re.finditer(r"^([a-z_]+) (\S+)$", body.decode(), re.M)}

    def stop(self, timeout=30):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait(timeout=10)
            self.log.close()


INFER_CACHE = {}


def llama_infer(prompt, max_tokens, *model_flags):
    """Greedy text and counts from llama_infer: (completion, finish_reason, prompt_tokens, completion_tokens)."""
    key = (prompt, max_tokens, model_flags)
    if key not in INFER_CACHE:
        result = subprocess.run([ARGS.infer, "--temp", "0", "-p", prompt, "-n", str(max_tokens), *model_flags],
                                capture_output=True, timeout=120)
        assert result.returncode == 0, result.stderr.decode(errors="replace")
        stdout = result.stdout.decode()
        assert stdout.startswith(prompt) and stdout.endswith("\n"), stdout
        stats = re.search(r"prompt: (\d+) tokens.*generated: (\d+) tokens.*\((.*)\)", result.stderr.decode())
        assert stats, result.stderr.decode()
        finish = "length" if stats.group(3) == "length" else "stop"  # else "end of text"
        INFER_CACHE[key] = (stdout[len(prompt):-1], finish, int(stats.group(1)), int(stats.group(2)))
    return INFER_CACHE[key]


def check_greedy(test, prompt, max_tokens, got, what=""):
    """A greedy completion `got` = (text, finish_reason, completion_tokens) against llama_infer,
    which ends a story where the model ends it (its end tokens, and BOS for llama2.c models)."""
    want_text, want_finish, _, want_tokens = llama_infer(prompt, max_tokens)
    test.assertEqual(got, (want_text, want_finish, want_tokens), what)


def llama_chat_reply(message, max_tokens):
    result = subprocess.run([ARGS.chat, "--temp", "0", "--max-reply", str(max_tokens)], input=(message + "\n").encode(),
                            capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    return result.stdout.decode()[:-1]


def stream_completion(client, prompt, max_tokens, **extra):
    stream = client.completions.create(model="stories260K", prompt=prompt, max_tokens=max_tokens, temperature=0,
                                       stream=True, stream_options={"include_usage": True}, **extra)
    text, finish, usage = "", None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.text
            finish = choice.finish_reason or finish
    return text, finish, usage.completion_tokens if usage else None


def error_of(body):
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"], error
    return error


class StoriesServer(unittest.TestCase):
    """The bundled model; one server for every test in this class."""

    @classmethod
    def setUpClass(cls):
        cls.server = Server("-m", os.path.join(ARGS.source_dir, "models/stories260K/stories260K.bin"),
                            "--max-seqs", "16")
        cls.client = cls.server.client

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        assert code == 0, f"exit code {code}: {cls.server.output()[-2000:]}"

    def test_models_and_health(self):
        self.assertEqual([m.id for m in self.client.models.list().data], ["stories260K"])
        self.assertEqual(self.server.get("/health"), (200, b'{"status":"ok"}'))
        with self.assertRaises(openai.NotFoundError) as caught:
            self.client.completions.create(model="gpt-4", prompt="x", max_tokens=4)
        self.assertEqual(caught.exception.body["param"], "model")

    def test_completion(self):
        answer = self.client.completions.create(model="stories260K", prompt="Once upon a time", max_tokens=200,
                                                temperature=0)
        check_greedy(self, "Once upon a time", 200,
                     (answer.choices[0].text, answer.choices[0].finish_reason, answer.usage.completion_tokens))
        self.assertEqual(answer.usage.prompt_tokens, llama_infer("Once upon a time", 200)[2])
        self.assertEqual(answer.object, "text_completion")

    def test_completion_stream(self):
        check_greedy(self, "One day, a little cat", 150, stream_completion(self.client, "One day, a little cat", 150))

    def test_stop_at_length(self):
        expected, finish, _, completion_tokens = llama_infer("Once upon a time", 7)
        self.assertEqual((finish, completion_tokens), ("length", 7))
        answer = self.client.completions.create(model="stories260K", prompt="Once upon a time", max_tokens=7,
                                                temperature=0)
        self.assertEqual((answer.choices[0].text, answer.choices[0].finish_reason), (expected, "length"))
        self.assertEqual(answer.usage.completion_tokens, 7)

    def test_stop_string(self):
        full = llama_infer("Once upon a time", 100)[0]
        self.assertIn(" Lily", full)
        answer = self.client.completions.create(model="stories260K", prompt="Once upon a time", max_tokens=100,
                                                temperature=0, stop=[" Lily", "zzz"])
        self.assertEqual((answer.choices[0].text, answer.choices[0].finish_reason),
                         (full[:full.index(" Lily")], "stop"))

    def test_chat(self):
        expected = llama_chat_reply("Tell me a story about a dog.", 60)
        messages = [{"role": "user", "content": "Tell me a story about a dog."}]
        answer = self.client.chat.completions.create(model="stories260K", messages=messages, max_tokens=60,
                                                     temperature=0)
        self.assertEqual(answer.object, "chat.completion")
        self.assertEqual(answer.choices[0].message.role, "assistant")
        self.assertEqual(answer.choices[0].message.content, expected)
        self.assertGreater(answer.usage.prompt_tokens, 0)
        streamed, roles, usage = "", [], None
        for chunk in self.client.chat.completions.create(model="stories260K", messages=messages, max_tokens=60,
                                                         temperature=0, stream=True,
                                                         stream_options={"include_usage": True}):
            self.assertEqual(chunk.object, "chat.completion.chunk")
            usage = chunk.usage or usage
            if chunk.choices:
                delta = chunk.choices[0].delta
                roles += [delta.role] if delta.role else []
                streamed += delta.content or ""
        self.assertEqual(streamed, expected)
        self.assertEqual(roles, ["assistant"])
        # The same prompt again: its full KV blocks come from the prefix cache.
        self.assertEqual(usage.prompt_tokens, answer.usage.prompt_tokens)
        self.assertGreaterEqual(usage.prompt_tokens_details.cached_tokens, 16)
        self.assertGreaterEqual(self.server.metrics()["kuiper_prompt_tokens_cached_total"], 16)

    def test_chat_with_history(self):
        messages = [{"role": "system", "content": "You tell stories."}, {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "A story"}]
        answer = self.client.chat.completions.create(model="stories260K", messages=messages, max_tokens=20,
                                                     temperature=0)
        self.assertIn(answer.choices[0].finish_reason, ("stop", "length"))
        with self.assertRaises(openai.BadRequestError) as caught:
            self.client.chat.completions.create(model="stories260K", messages=messages[:3], max_tokens=5)
        self.assertEqual(caught.exception.body["param"], "messages")

    def test_sixteen_concurrent_streams(self):
        lengths = [20 + 23 * i for i in range(len(STORY_PROMPTS))]
        results = [None] * len(STORY_PROMPTS)

        def run(i):
            try:
                results[i] = stream_completion(self.client, STORY_PROMPTS[i], lengths[i])
            except Exception as e:  # reported below, per stream
                results[i] = e

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(STORY_PROMPTS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=REQUEST_TIMEOUT)
        for i, got in enumerate(results):
            self.assertIsInstance(got, tuple, f"stream {i}: {got}")
            check_greedy(self, STORY_PROMPTS[i], lengths[i], got, f"stream {i}: {STORY_PROMPTS[i]!r}, {lengths[i]} tokens")

    def test_many_clients_connect_at_once(self):
        # Every handshake of a burst of connections completes at once: one the kernel dropped for a
        # full listen backlog would be retried a second later.
        sockets = [socket.socket() for _ in range(64)]
        try:
            started = time.monotonic()
            for s in sockets:
                s.setblocking(False)
                s.connect_ex(("127.0.0.1", self.server.port))
            pending = list(sockets)
            while pending and time.monotonic() - started < 5:
                _, connected, _ = select.select([], pending, [], 5)
                pending = [s for s in pending if s not in connected]
            self.assertEqual(pending, [])
            self.assertLess(time.monotonic() - started, 0.5)
            self.assertEqual([s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) for s in sockets], [0] * len(sockets))
        finally:
            for s in sockets:
                s.close()
        self.assertEqual(self.server.get("/health")[0], 200)

    def test_hostile_requests_leave_others_alone(self):
        prompts = STORY_PROMPTS[:4]
        results = [None] * len(prompts)

        def run(i):
            try:
                results[i] = stream_completion(self.client, prompts[i], 250)
            except Exception as e:
                results[i] = e

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        ok = json.dumps({"model": "stories260K", "prompt": "Once", "max_tokens": 4}).encode()
        long_prompt = " ".join(["the little dog ran to the park"] * 120)
        cases = [
            ("bad JSON", b'{"model": "stories260K", "prompt": ', API_KEY, 400, None),
            ("not an object", b'[1, 2, 3]', API_KEY, 400, None),
            ("10 MB body", b'{"model": "stories260K", "prompt": "' + b"a" * (10 << 20) + b'"}', API_KEY, 413, None),
            ("negative max_tokens", json.dumps({"model": "stories260K", "prompt": "x", "max_tokens": -1}).encode(),
             API_KEY, 400, "max_tokens"),
            ("huge max_tokens", json.dumps({"model": "stories260K", "prompt": "x", "max_tokens": 10 ** 12}).encode(),
             API_KEY, 400, "max_tokens"),
            ("invalid UTF-8", b'{"model": "stories260K", "prompt": "\xff\xfe\xc3"}', API_KEY, 400, None),
            ("wrong type", json.dumps({"model": "stories260K", "prompt": "x", "temperature": "hot"}).encode(),
             API_KEY, 400, "temperature"),
            ("n = 2", json.dumps({"model": "stories260K", "prompt": "x", "n": 2}).encode(), API_KEY, 400, "n"),
            ("prompt beyond the context", json.dumps({"model": "stories260K", "prompt": long_prompt}).encode(),
             API_KEY, 400, "prompt"),
            ("wrong key", ok, "not-the-key", 401, None),
            ("missing key", ok, None, 401, None),
        ]
        for name, body, key, status, param in cases:
            got_status, got_body = self.server.post("/v1/completions", body, key=key)
            self.assertEqual(got_status, status, f"{name}: {got_body[:300]!r}")
            error = error_of(got_body)
            if param:
                self.assertEqual(error["param"], param, name)
        with self.assertRaises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"http://127.0.0.1:{self.server.port}/v1", api_key="wrong",
                          max_retries=0, timeout=REQUEST_TIMEOUT).models.list()
        for t in threads:
            t.join(timeout=REQUEST_TIMEOUT)
        for i, got in enumerate(results):
            self.assertIsInstance(got, tuple, f"stream {i}: {got}")
            check_greedy(self, prompts[i], 250, got, f"stream {i} beside the hostile requests")
        self.assertEqual(self.server.get("/health")[0], 200)


class SlowServer(unittest.TestCase):
    """A random-weight model slow enough that a long request is still running when the test
    acts on it; --max-seqs 1 --max-waiting 1 to fill the queue with three requests."""

    @classmethod
    def setUpClass(cls):
        model = os.path.join(ARGS.work_dir, "random_384x8.bin")
        if not os.path.exists(model):
            subprocess.run([sys.executable, os.path.join(ARGS.source_dir, "scripts/make_random_llama2c.py"),
                            "--shape", "384,1024,8,6,6,512", "--seq-len", "2048", model], check=True, timeout=120)
        cls.flags = ("-m", model, "-t", os.path.join(ARGS.source_dir, "models/stories260K/tok512.bin"),
                     "--model-name", "random", "--max-seqs", "1", "--max-waiting", "1")

    def long_stream(self, client, max_tokens=2000):
        return client.completions.create(model="random", prompt="Once upon a time", max_tokens=max_tokens,
                                         temperature=0, stream=True, extra_body={"ignore_eos": True})

    def wait_for(self, server, condition, seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            metrics = server.metrics()
            if condition(metrics):
                return metrics
            time.sleep(0.05)
        self.fail(f"metrics never met the condition: {server.metrics()}")

    def test_disconnect_queue_full_and_shutdown(self):
        server = Server(*self.flags)
        try:
            before = server.metrics()
            # A client that goes away mid-stream.
            started = time.monotonic()
            stream = self.long_stream(server.client)
            for count, _ in enumerate(stream):
                if count == 3:
                    break
            stream.close()
            after = self.wait_for(server, lambda m: m["kuiper_requests_cancelled_total"] == 1 and
                                  m["kuiper_requests_running"] == 0, 20)
            elapsed = time.monotonic() - started
            self.assertEqual(after["kuiper_requests_finished_total"], before["kuiper_requests_finished_total"])
            self.assertLess(after["kuiper_generated_tokens_total"], 2000, "the request ran to its end")
            self.assertEqual(after["kuiper_kv_blocks_free"] + after["kuiper_kv_blocks_used"],
                             after["kuiper_kv_blocks_total"])
            self.assertEqual(after["kuiper_kv_blocks_used"], before["kuiper_kv_blocks_used"],
                             "the cancelled request's KV blocks did not come back")
            print(f"disconnect: cancelled after {after['kuiper_generated_tokens_total']:.0f} of 2000 tokens, "
                  f"{elapsed:.2f} s", file=sys.stderr)

            # Queue full: one running, one waiting, the third refused.
            running = self.long_stream(server.client)
            first = next(iter(running))  # it runs
            self.assertTrue(first.choices)
            # A queued stream whose client leaves before its first token: noticed by the
            # keep-alive comments written while it waits, and cancelled without running.
            queued = self.long_stream(server.client)
            self.wait_for(server, lambda m: m["kuiper_requests_waiting"] == 1, 20)
            queued.close()
            self.wait_for(server, lambda m: m["kuiper_requests_waiting"] == 0 and
                          m["kuiper_requests_cancelled_total"] == 2, 20)
            waiting_result = []
            waiting = threading.Thread(target=lambda: waiting_result.append(
                server.post("/v1/completions", json.dumps({"model": "random", "prompt": "x", "max_tokens": 2}).encode())))
            waiting.start()
            self.wait_for(server, lambda m: m["kuiper_requests_waiting"] == 1, 20)
            with self.assertRaises(openai.RateLimitError):
                server.client.completions.create(model="random", prompt="y", max_tokens=2)

            # Shutdown while a stream runs: it ends with an error event, the waiting request with
            # a 503, the server exits 0.
            server.process.send_signal(signal.SIGTERM)
            with self.assertRaises(openai.APIError):
                for _ in running:
                    pass
            waiting.join(timeout=REQUEST_TIMEOUT)
            self.assertEqual(waiting_result[0][0], 503, waiting_result)
            self.assertEqual(server.process.wait(timeout=30), 0, server.output()[-2000:])
        finally:
            server.stop()


class CommandLine(unittest.TestCase):
    """Bad start-up input: one line on stderr and a non-zero exit, never a server."""

    def run_server(self, *flags):
        result = subprocess.run([ARGS.server, *flags], capture_output=True, timeout=60)
        return result.returncode, result.stderr.decode(errors="replace").strip().splitlines()

    def test_errors(self):
        code, lines = self.run_server("-m", os.path.join(ARGS.work_dir, "no_such_model.bin"))
        self.assertEqual(code, 1)
        self.assertEqual(len(lines), 1, lines)
        self.assertIn("no_such_model.bin", lines[0])
        code, lines = self.run_server("--port", "70000")
        self.assertEqual(code, 2, lines)
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            code, lines = self.run_server("--port", str(port))
        self.assertEqual(code, 1)
        self.assertEqual(lines, [f"kuiper_server: error: cannot listen on 127.0.0.1:{port}"])


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--infer", required=True)
    parser.add_argument("--chat", required=True)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--work-dir", required=True)
    ARGS, rest = parser.parse_known_args()
    os.makedirs(ARGS.work_dir, exist_ok=True)
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
