#!/usr/bin/env bash
# wheel_test.sh BUILD_DIR: builds the llmtap wheel (the llmtap_wheel target: pip wheel, offline),
# installs it with `pip install --no-index` into a fresh virtual environment (no system
# packages), and from outside the source and build trees runs a bare ASGI app wrapped in the
# installed llmtap.asgi.CaptureMiddleware: the capture file, its manifest and the outcomes
# sidecar must be written as the proxy writes them.
set -euo pipefail
build=$(realpath "$1")
python=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cmake --build "$build" --target llmtap_wheel >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
version=$("$build/llmtap" --version | awk '{print $2}')
wheel=$(ls "$build"/dist/llmtap-"$version"-cp3*-linux_x86_64.whl)
echo "wheel: $(basename "$wheel"), $(stat -c %s "$wheel") bytes"

"$python" -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install --quiet --no-index --no-deps "$wheel"
cd "$tmp"
NIM_CAPTURE_ENABLE=1 NIM_CAPTURE_ARGS='{"path":"c/requests.jsonl","outcomes":true}' \
  "$tmp/venv/bin/python" - "$tmp/venv" <<'PYEOF'
import asyncio, json, os, sys

import llmtap.asgi

assert llmtap.asgi.__file__.startswith(sys.argv[1]), llmtap.asgi.__file__  # the installed copy


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            kind = message["type"].split(".")[1]
            await send({"type": f"lifespan.{kind}.complete"})
            if kind == "shutdown":
                return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    answer = {"choices": [{"finish_reason": "stop"}],
              "usage": {"prompt_tokens": len(body), "completion_tokens": 2}}
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": json.dumps(answer).encode()})


async def main():
    middleware = llmtap.asgi.CaptureMiddleware(app)
    shutdown = asyncio.Event()
    lifespan = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]

    async def lifespan_receive():
        if len(lifespan) == 1:
            await shutdown.wait()
        return lifespan.pop(0)

    async def ignore(message):
        pass

    task = asyncio.create_task(middleware({"type": "lifespan"}, lifespan_receive, ignore))
    await asyncio.sleep(0)
    for chunks in ([b'{ "model": "m",\n  "prompt": "hello" }'], [b'{"model":"m",', b'"messages":[]}']):
        messages = [{"type": "http.request", "body": c, "more_body": i + 1 < len(chunks)}
                    for i, c in enumerate(chunks)]

        async def receive():
            return messages.pop(0)

        scope = {"type": "http", "method": "POST", "path": "/v1/completions",
                 "raw_path": b"/v1/completions", "headers": []}
        await middleware(scope, receive, ignore)
    shutdown.set()
    await task


asyncio.run(main())
rows = [json.loads(line) for line in open("c/requests.jsonl")]
assert [r["payload"] for r in rows] == [{"model": "m", "prompt": "hello"},
                                        {"model": "m", "messages": []}], rows
outcomes = [json.loads(line) for line in open("c/requests.jsonl.outcomes.ndjson")]
assert [(o["line"], o["status"], o["completion_tokens"]) for o in outcomes] == [(1, 200, 2), (2, 200, 2)]
manifest = json.load(open("c/requests.jsonl.manifest.json"))
assert manifest["state"] == "stopped" and manifest["file"]["records"] == 2, manifest
assert manifest["counters"]["recorded"] == 2 and manifest["pid"] == os.getpid(), manifest
print("installed wheel: 2 records, outcomes and manifest written;", os.path.basename(sys.argv[1]))
PYEOF
