#!/usr/bin/python3
"""CPU per request added by llmtap.asgi.CaptureMiddleware, against the same ASGI app without it
and against the obvious hand-written alternative (a plain-Python middleware that reads the body,
json.loads it, json.dumps it and appends the line to a file), all measured in one process, in
alternating rounds.

    PYTHONPATH=build/python /usr/bin/python3 bench/asgi_overhead.py [--requests 20000] [--rounds 5]

Each request is driven through the ASGI interface directly (no HTTP server, so its cost does
not hide the middleware's): a POST /v1/chat/completions with a 1 KB JSON body, in one
http.request message (and, in the "chunked" rows, in four), answered with a small JSON body
carrying usage, as an inference server's non-streaming answer does. CPU is process time (every
thread: the capture core's writer thread is counted). Each configuration writes its capture to a
fresh temporary directory (tmpfs or not: whatever TMPDIR is)."""

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time

from llmtap.asgi import CaptureMiddleware

ANSWER = json.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 250, "completion_tokens": 1, "total_tokens": 251},
    }
).encode()


def request_body(i, size=1024):
    head = {"model": "meta-llama/Llama-3.1-8B-Instruct", "max_tokens": 64, "stream": False,
            "messages": [{"role": "system", "content": "You are a helpful assistant."},
                         {"role": "user", "content": ""}]}
    base = len(json.dumps(head, separators=(",", ":"))) + 16
    words = " ".join(f"w{(i * 31 + k) % 997}" for k in range(size))
    head["messages"][1]["content"] = f"request {i}: " + words[: size - base]
    body = json.dumps(head, indent=1).encode()  # pretty-printed, as many clients send
    return body[:size] if len(body) <= size else body


async def app(scope, receive, send):
    """A minimal inference-server-like app: reads the whole body, parses it, answers JSON."""
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    json.loads(b"".join(chunks))
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": ANSWER})


class PlainPythonCapture:
    """The hand-written way: buffer the body, json.loads + json.dumps it, append a line."""

    def __init__(self, app, path):
        self.app = app
        self.file = open(path, "a", encoding="utf-8")
        self.t0 = time.monotonic()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        chunks = []

        async def tee():
            message = await receive()
            if message["type"] == "http.request":
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    try:
                        payload = json.loads(b"".join(chunks))
                        line = json.dumps({"timestamp": int((time.monotonic() - self.t0) * 1000),
                                           "payload": payload}, separators=(",", ":"))
                        self.file.write(line + "\n")
                    except ValueError:
                        pass
            return message

        await self.app(scope, tee, send)

    def close(self):
        self.file.close()


async def drive(handler, bodies, pieces):
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions",
             "raw_path": b"/v1/chat/completions", "headers": [(b"content-type", b"application/json")]}

    async def send(message):
        pass

    for body in bodies:
        if pieces == 1:
            messages = [{"type": "http.request", "body": body, "more_body": False}]
        else:
            step = (len(body) + pieces - 1) // pieces
            parts = [body[k:k + step] for k in range(0, len(body), step)]
            messages = [{"type": "http.request", "body": p, "more_body": k + 1 < len(parts)}
                        for k, p in enumerate(parts)]
        it = iter(messages)

        async def receive():
            return next(it)

        await handler(scope, receive, send)


def run(kind, bodies, pieces, workdir):
    env = {}
    if kind.startswith("llmtap"):
        args = {"path": os.path.join(workdir, "requests.jsonl")}
        if kind == "llmtap+outcomes":
            args["outcomes"] = True
        env = {"NIM_CAPTURE_ENABLE": "1", "NIM_CAPTURE_ARGS": json.dumps(args)}
        handler = CaptureMiddleware(app, environ=env, file_tag="")
        handler.start()
    elif kind == "plain-python":
        handler = PlainPythonCapture(app, os.path.join(workdir, "plain.jsonl"))
    else:
        handler = app
    cpu0 = time.process_time()
    asyncio.run(drive(handler, bodies, pieces))
    if kind.startswith("llmtap"):
        handler.stop()  # the writer's work for these requests is done (and counted) by now
        assert handler.capture.counters()["recorded"] == len(bodies), handler.capture.counters()
    elif kind == "plain-python":
        handler.close()
    return (time.process_time() - cpu0) / len(bodies) * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    a = parser.parse_args()
    bodies = [request_body(i) for i in range(a.requests)]
    sizes = sorted(len(b) for b in bodies)
    kinds = ["app alone", "llmtap", "llmtap+outcomes", "plain-python"]
    results = {(k, p): [] for k in kinds for p in (1, 4)}
    for r in range(a.rounds):
        for pieces in (1, 4):
            for kind in kinds:  # alternating, so that drift hits every configuration alike
                with tempfile.TemporaryDirectory() as d:
                    results[(kind, pieces)].append(run(kind, bodies, pieces, d))
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    print(f"{a.requests} requests per round, {a.rounds} rounds, bodies {sizes[0]}-{sizes[-1]} bytes; "
          "median CPU per request (µs), and the added CPU over the app alone")
    for pieces in (1, 4):
        base = statistics.median(results[("app alone", pieces)])
        added = {}
        for kind in kinds:
            m = statistics.median(results[(kind, pieces)])
            added[kind] = m - base
            spread = f"{min(results[(kind, pieces)]):.2f}-{max(results[(kind, pieces)]):.2f}"
            extra = "" if kind == "app alone" else f"  added {m - base:6.2f}"
            print(f"  body in {pieces} message(s)  {kind:16s} {m:7.2f} ({spread}){extra}")
        for kind in ("llmtap", "llmtap+outcomes"):
            if added[kind] > 0:
                print(f"  body in {pieces} message(s)  plain-python added / {kind} added = "
                      f"{added['plain-python'] / added[kind]:.2f}x")


if __name__ == "__main__":
    main()
