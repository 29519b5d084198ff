#!/usr/bin/env python3
"""Drives a kuiper_server (or any OpenAI-compatible server) with N concurrent streaming clients
and prints requests/s, output tokens/s, time to first token and inter-token latency (median
and p99).

    load_server.py --clients 8 --requests 4 --max-tokens 128 --model stories260K

Each client sends its requests one after another (POST /v1/completions, stream: true,
stream_options.include_usage, temperature 0 unless told otherwise). Output tokens are the
server's usage counts. Time to first token runs from sending the request to the first chunk
with text; inter-token latency is the gap between consecutive text chunks divided by the
tokens they carry (a chunk carries the tokens of one engine step per request, so normally one).
The default client is plain http.client with a line reader, to take as little CPU from the
server as possible; on a shared machine run it with the server's core count in mind.
`--client openai` sends the same requests through the official `openai` Python SDK instead
(what applications use), one SDK client per thread.

The clients are threads spread over `--processes` processes (by default one per core, at most
one per client): the SDK parses each chunk into objects under Python's global lock, and one
process of it takes in no more than ~3,700 chunks a second on the 2-core CI machine, which 64
streams of a GPU server exceed.
"""
import argparse
import functools
import http.client
import json
import multiprocessing
import operator
import os
import queue
import statistics
import sys
import threading
import time
from urllib.parse import urlparse

try:
    import openai
except ImportError:  # needed for --client openai only
    openai = None


def percentile(values, p):
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


class Client(threading.Thread):
    def __init__(self, args, index):
        super().__init__(daemon=True)
        self.args = args
        self.index = index
        self.ttft, self.itl, self.tokens, self.done, self.errors = [], [], 0, 0, []

    def record(self, sent, text_times, completion_tokens):
        """One finished request: text_times are the arrival times of the chunks that carried text."""
        if text_times:
            self.ttft.append(text_times[0] - sent)
        # Spread each gap over the tokens its chunk carried (usage / chunks, normally 1).
        per_chunk = completion_tokens / len(text_times) if text_times else 1
        self.itl += [(b - a) / per_chunk for a, b in zip(text_times, text_times[1:])]
        self.tokens += completion_tokens
        self.done += 1

    def one_openai_request(self, client, prompt):
        extra = {"ignore_eos": True} if self.args.ignore_eos else None
        sent = time.perf_counter()
        stream = client.completions.create(model=self.args.model, prompt=prompt, max_tokens=self.args.max_tokens,
                                           temperature=self.args.temperature, stream=True,
                                           stream_options={"include_usage": True}, extra_body=extra)
        text_times, completion_tokens = [], 0
        for chunk in stream:
            if chunk.usage:
                completion_tokens = chunk.usage.completion_tokens
            if any(c.text for c in chunk.choices):
                text_times.append(time.perf_counter())
        self.record(sent, text_times, completion_tokens)

    def one_request(self, connection, prompt):
        body = {"model": self.args.model, "prompt": prompt, "max_tokens": self.args.max_tokens,
                "temperature": self.args.temperature, "stream": True, "stream_options": {"include_usage": True}}
        if self.args.ignore_eos:
            body["ignore_eos"] = True
        headers = {"Content-Type": "application/json"}
        if self.args.api_key:
            headers["Authorization"] = "Bearer " + self.args.api_key
        sent = time.perf_counter()
        connection.request("POST", self.args.path, body=json.dumps(body), headers=headers)
        response = connection.getresponse()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {response.read()[:200]!r}")
        text_times, completion_tokens = [], 0
        while True:
            line = response.readline()
            if not line:
                break
            if not line.startswith(b"data: "):
                continue
            data = line[6:].strip()
            if data == b"[DONE]":
                break
            chunk = json.loads(data)
            if "error" in chunk:
                raise RuntimeError(chunk["error"].get("message"))
            if chunk.get("usage"):
                completion_tokens = chunk["usage"]["completion_tokens"]
            if any(c.get("text") for c in chunk.get("choices", [])):
                text_times.append(time.perf_counter())
        response.read()
        self.record(sent, text_times, completion_tokens)

    def run_openai(self):
        client = openai.OpenAI(base_url=self.args.url.rstrip("/") + "/v1", api_key=self.args.api_key or "none",
                               timeout=self.args.timeout, max_retries=0)
        for r in range(self.args.requests):
            try:
                self.one_openai_request(client, self.args.prompts[(self.index + r) % len(self.args.prompts)])
            except Exception as e:  # counted and reported; the client goes on
                self.errors.append(str(e))

    def run(self):
        if self.args.client == "openai":
            self.run_openai()
            return
        url = urlparse(self.args.url)
        connection = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=self.args.timeout)
        for r in range(self.args.requests):
            prompt = self.args.prompts[(self.index + r) % len(self.args.prompts)]
            try:
                self.one_request(connection, prompt)
            except Exception as e:  # counted and reported; the client goes on with a new connection
                self.errors.append(str(e))
                connection.close()
                connection = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=self.args.timeout)
        connection.close()


MEASURES = ("done", "tokens", "ttft", "itl", "errors")


def combined(parts):
    """The measures of several clients or processes (dicts of MEASURES, at least one) as one: counts
    add, lists concatenate."""
    parts = list(parts)
    return {m: functools.reduce(operator.add, (p[m] for p in parts)) for m in MEASURES}


def run_clients(args, indices, ready, results):
    """One worker process: runs clients `indices` as threads once every worker is ready, and puts
    what they measured on `results`."""
    clients = [Client(args, i) for i in indices]
    ready.wait()
    for c in clients:
        c.start()
    for c in clients:
        c.join()
    results.put(combined({m: getattr(c, m) for m in MEASURES} for c in clients))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--path", default="/v1/completions")
    parser.add_argument("--client", choices=["http", "openai"], default="http",
                        help="plain http.client (least CPU) or the official openai SDK")
    parser.add_argument("--model", default="stories260K")
    parser.add_argument("--api-key", default="")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--processes", type=int, default=0,
                        help="processes the clients are spread over (default: one per core, at most one per client)")
    parser.add_argument("--requests", type=int, default=4, help="requests per client, one after another")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--ignore-eos", action="store_true", help="every request generates max-tokens tokens")
    parser.add_argument("--timeout", type=float, default=600, help="seconds, per request")
    parser.add_argument("--prompt", action="append", dest="prompts",
                        help="a prompt (repeat for several; clients take them in turn)")
    args = parser.parse_args()
    if args.clients < 1 or args.requests < 1 or args.max_tokens < 1 or args.processes < 0:
        parser.error("--clients, --requests and --max-tokens must be >= 1, --processes >= 0")
    if args.client == "openai" and openai is None:
        sys.exit("load_server.py: --client openai needs the openai package (pip install openai)")
    args.prompts = args.prompts or ["Once upon a time", "One day, a little cat", "Lily and Ben went to the park",
                                    "The sun was hot", "Tom had a red ball", "There was a big tree",
                                    "Sue liked to sing", "A small bird flew"]

    processes = min(args.processes or os.cpu_count() or 1, args.clients)
    context = multiprocessing.get_context("spawn")  # no threads or sockets inherited
    ready = context.Barrier(processes + 1)
    results = context.Queue()
    workers = [context.Process(target=run_clients, args=(args, range(p, args.clients, processes), ready, results))
               for p in range(processes)]
    for w in workers:
        w.start()
    try:
        ready.wait(timeout=120)  # every worker has its clients made: the clock starts with them
        start = time.perf_counter()
        # Each request ends within --timeout; a worker that died leaves its share missing.
        shares = [results.get(timeout=args.timeout * args.requests + 60) for _ in workers]
    except (threading.BrokenBarrierError, queue.Empty):
        for w in workers:
            w.terminate()
        sys.exit("load_server.py: a client process died or hung (exit codes "
                 f"{[w.exitcode for w in workers]})")
    elapsed = time.perf_counter() - start
    for w in workers:
        w.join()

    total = combined(shares)
    done, tokens, ttft, itl, errors = (total[m] for m in MEASURES)
    print(f"{args.client} client, {args.clients} clients x {args.requests} requests, max_tokens {args.max_tokens}, "
          f"{processes} processes: {done} done, {len(errors)} failed in {elapsed:.2f} s")
    print(f"requests/s: {done / elapsed:.2f}   output tokens/s: {tokens / elapsed:.1f}   ({tokens} tokens)")
    if ttft:
        print(f"time to first token: median {statistics.median(ttft) * 1e3:.1f} ms, "
              f"p99 {percentile(ttft, 99) * 1e3:.1f} ms")
    if itl:
        print(f"inter-token latency: median {statistics.median(itl) * 1e3:.2f} ms, "
              f"p99 {percentile(itl, 99) * 1e3:.2f} ms")
    for e in errors[:5]:
        print("error:", e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
