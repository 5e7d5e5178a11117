#!/usr/bin/python3
"""Server CPU per HTTP request of a FastAPI app under uvicorn, alone and in
llmtap.asgi.CaptureMiddleware (capture on, outcomes off and on), measured from outside as an
operator would: wrk sends keep-alive POST /v1/chat/completions requests with a 1 KB JSON body for
a fixed time, and the server process's CPU (user + system, every thread: the capture core's writer
thread is counted) over that time is divided by the requests wrk completed. The configurations run
in alternating rounds, each in a fresh server process, so that drift hits all of them alike; the
middleware's cost is the difference to the app alone of the same rounds, and its ratio.

    PYTHONPATH=build/python /usr/bin/python3 bench/asgi_http_cpu.py [--seconds 5] [--rounds 5]
        [--connections 4]

The app is an inference server's API layer without its model (fastapi_app below: FastAPI reads
the body with request.json() and answers a chat completion with usage). bench/asgi_overhead.py
measures the middleware alone, without HTTP, through the ASGI interface."""

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

KINDS = ["app alone", "llmtap", "llmtap+outcomes"]

LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = [[%s]]
"""


def body(size=1024):
    head = {"model": "bench", "max_tokens": 16,
            "messages": [{"role": "system", "content": "You are a helpful assistant."},
                         {"role": "user", "content": ""}]}
    base = len(json.dumps(head, separators=(",", ":")))
    head["messages"][1]["content"] = " ".join(f"w{k % 997}" for k in range(size))[: size - base]
    return json.dumps(head, separators=(",", ":"))


def fastapi_app():
    """An inference server's API layer without its model: FastAPI reads the body
    (request.json(), Python's json, as vLLM's server does) and answers a chat completion with
    usage."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        n = int(body.get("max_tokens") or 16)
        return JSONResponse({
            "id": "chatcmpl-bench", "object": "chat.completion", "created": 1700000000,
            "model": body.get("model", "bench"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok " * n},
                         "logprobs": None, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 250, "completion_tokens": n, "total_tokens": 250 + n}})

    return app


def serve(kind, workdir):
    """The server process: the app (in the middleware for the llmtap kinds) on a free port."""
    import uvicorn

    app = fastapi_app()
    if kind.startswith("llmtap"):
        from llmtap.asgi import CaptureMiddleware

        args = {"path": os.path.join(workdir, "requests.jsonl"), "outcomes": kind.endswith("outcomes")}
        app = CaptureMiddleware(app, environ={"NIM_CAPTURE_ENABLE": "1",
                                              "NIM_CAPTURE_ARGS": json.dumps(args)}, file_tag="")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)  # connections made before uvicorn runs wait in the backlog
    print(f"port {sock.getsockname()[1]}", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False)).run(sockets=[sock])


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wrk(port, seconds, connections, script):
    out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "-s", script,
                          f"http://127.0.0.1:{port}/v1/chat/completions"],
                         capture_output=True, text=True, check=True).stdout
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if non2xx:
        raise RuntimeError(f"{non2xx.group(1)} requests failed:\n{out}")
    return requests


def measure(kind, a, script):
    """CPU µs per request of one fresh server of `kind`, after a one-second warm-up."""
    with tempfile.TemporaryDirectory() as d:
        server = subprocess.Popen([sys.executable, __file__, "--serve", kind, d],
                                  stdout=subprocess.PIPE, text=True)
        try:
            port = int(server.stdout.readline().split()[1])
            wrk(port, 1, a.connections, script)
            cpu0 = cpu_seconds(server.pid)
            n = wrk(port, a.seconds, a.connections, script)
            cpu = cpu_seconds(server.pid) - cpu0
        finally:
            server.terminate()
            server.wait()
        if kind.startswith("llmtap"):
            with open(os.path.join(d, "requests.jsonl")) as f:
                recorded = sum(1 for _ in f)
            assert recorded >= n, f"{recorded} recorded of {n} answered"
        return cpu / n * 1e6, n


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--serve", nargs=2, metavar=("KIND", "DIR"), help=argparse.SUPPRESS)
    a = parser.parse_args()
    if a.serve:
        return serve(*a.serve)
    results = {k: [] for k in KINDS}
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(LUA % body())
        script = f.name
    try:
        for r in range(a.rounds):
            order = KINDS if r % 2 == 0 else KINDS[::-1]  # alternating
            for kind in order:
                results[kind].append(measure(kind, a, script))
            print(f"round {r + 1}/{a.rounds}: " + ", ".join(
                f"{k} {results[k][-1][0]:.1f} µs ({results[k][-1][1]} requests)" for k in KINDS),
                file=sys.stderr)
    finally:
        os.unlink(script)
    base = statistics.median(c for c, _ in results["app alone"])
    print(f"{a.rounds} rounds of {a.seconds:g} s, {a.connections} connections, "
          f"{len(body())}-byte body; server CPU per request, median (spread)")
    for kind in KINDS:
        cpus = [c for c, _ in results[kind]]
        m = statistics.median(cpus)
        line = f"  {kind:16s} {m:7.1f} µs ({min(cpus):.1f}-{max(cpus):.1f})"
        if kind != "app alone":
            # Per round, against the app alone of the same round.
            ratios = [c / b for (c, _), (b, _) in zip(results[kind], results["app alone"])]
            line += (f"  added {m - base:5.1f} µs, {statistics.median(ratios):.3f}x the app alone "
                     f"(rounds {min(ratios):.3f}-{max(ratios):.3f})")
        print(line)


if __name__ == "__main__":
    sys.exit(main())
