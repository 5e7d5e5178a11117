"""A FastAPI + uvicorn upstream for the proxy's tests: answers OpenAI chat and completion
requests the way vLLM does (SSE `data: {...}` events ending with `data: [DONE]`, or one JSON
body), deterministically from the request, and records what the tests check at the upstream:
the head of every request it received and when streaming clients went away.

Run: python3 app.py  -> prints "upstream listening on http://127.0.0.1:PORT" (a free port).

Special models: "slow-headers" waits 5 s before answering (the proxy's 504), "slow-stream"
sends one event every 50 ms for up to 200 events (the cancel test), "lockstep-stream" sends its
first event at once and each next one only after a `GET /release` (`?n=N`: N more; up to 200
events: a stream that cannot go on before the client saw what came so far), "unicode" answers
with text that needs JSON escapes (quotes, backslashes, newlines, é and 😀, sent as \\u
escapes), and "reasoning" sends reasoning_content before the content (streamed: in its own
deltas). A chat request with "tools" is answered with a call of each of its first two functions
(arguments streamed in fragments, the two calls interleaved by index), as vLLM's tool parsers
do.

POST /v1/responses and POST /v1/messages answer the OpenAI Responses API and Anthropic's Messages
API as vLLM serves them (streamed: the response.* events, or message_start ... message_stop),
with the same words, reasoning ("reasoning": a reasoning item, or a thinking block, first) and
tool calls (one function_call item, or tool_use block, per tool of the first two)."""

import asyncio
import json
import socket
import sys
import time

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

app = FastAPI()
STATE = {"requests": [], "disconnects": []}
# "lockstep-stream": GET /release counts up `released`; a stream that started at count b sends
# its event i (i >= 1) once the count reached b + i.
LOCKSTEP = {"released": 0, "cond": None}


def lockstep_cond():
    if LOCKSTEP["cond"] is None:
        LOCKSTEP["cond"] = asyncio.Condition()
    return LOCKSTEP["cond"]


UNICODE_PIECES = [" caf\u00e9", " \"quoted\"", " back\\slash", "\nnew line", " \U0001F600",
                  " tab\t", " na\u00efve"]


def words(body, n):
    if body.get("model") == "unicode":
        return [UNICODE_PIECES[i % len(UNICODE_PIECES)] for i in range(n)]
    seed = sum(ord(c) for c in json.dumps(body, sort_keys=True)) % 97
    return [f" w{(seed + i * 7) % 101}" for i in range(n)]


def reasoning(body):
    return ["Let me", " think \u00e9", " step by step."] if body.get("model") == "reasoning" else []


# The calls answering a request with "tools": (name, arguments JSON text) of its first two.
def tool_calls(body):
    calls = []
    for i, tool in enumerate((body.get("tools") or [])[:2]):
        name = (tool.get("function") or {}).get("name", f"tool{i}")
        args = json.dumps({"city": "Par\u00eds", "n": i, "note": "say \"hi\" \U0001F600"})
        calls.append((name, args))
    return calls


def fragments(text, size=5):
    return [text[i:i + size] for i in range(0, len(text), size)]


def usage(n):
    return {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n}


@app.middleware("http")
async def record(request: Request, call_next):
    STATE["requests"].append({
        "method": request.method,
        "path": request.url.path,
        "query": request.url.query,
        "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in request.scope["headers"]],
    })
    return await call_next(request)


@app.get("/stats")
async def stats():
    return STATE


@app.get("/release")
async def release(n: int = 1):
    cond = lockstep_cond()
    async with cond:
        LOCKSTEP["released"] += n
        cond.notify_all()
    return {"released": LOCKSTEP["released"]}


@app.post("/reset")
async def reset():
    STATE["requests"].clear()
    STATE["disconnects"].clear()
    return {}


async def generate(request: Request, body, chat: bool):
    model = body.get("model", "fastapi")
    n = int(body.get("max_tokens") or 8)
    rid = ("chatcmpl-" if chat else "cmpl-") + "fastapi"
    obj = "chat.completion.chunk" if chat else "text_completion"
    delay = 0.05 if model == "slow-stream" else 0.001
    if model in ("slow-stream", "lockstep-stream"):
        n = 200
    lockstep_base = LOCKSTEP["released"]

    async def lockstep(i):
        if model == "lockstep-stream" and i > 0:
            cond = lockstep_cond()
            async with cond:
                await cond.wait_for(lambda: LOCKSTEP["released"] >= lockstep_base + i)
    def event(choice):
        e = {"id": rid, "object": obj, "created": 1700000000, "model": model, "choices": [choice]}
        return "data: " + json.dumps(e, separators=(",", ":")) + "\n\n"

    try:
        calls = tool_calls(body) if chat else []
        for r in reasoning(body):
            yield event({"index": 0, "delta": {"reasoning_content": r}, "logprobs": None,
                         "finish_reason": None})
        if calls:
            for k, (name, _) in enumerate(calls):
                yield event({"index": 0, "delta": {"tool_calls": [
                    {"index": k, "id": f"call_{k}", "type": "function",
                     "function": {"name": name, "arguments": ""}}]},
                    "logprobs": None, "finish_reason": None})
            pieces = [fragments(args) for _, args in calls]
            for j in range(max(len(p) for p in pieces)):
                for k, p in enumerate(pieces):
                    if j < len(p):
                        yield event({"index": 0, "delta": {"tool_calls": [
                            {"index": k, "function": {"arguments": p[j]}}]},
                            "logprobs": None, "finish_reason": None})
                await asyncio.sleep(delay)
            yield event({"index": 0, "delta": {}, "logprobs": None,
                         "finish_reason": "tool_calls"})
            n = 0
        for i, w in enumerate(words(body, n)):
            await lockstep(i)
            if chat:
                delta = {"content": w}
                if i == 0:
                    delta["role"] = "assistant"
                choice = {"index": 0, "delta": delta, "logprobs": None,
                          "finish_reason": "length" if i == n - 1 else None}
            else:
                choice = {"index": 0, "text": w, "logprobs": None,
                          "finish_reason": "length" if i == n - 1 else None}
            event = {"id": rid, "object": obj, "created": 1700000000, "model": model,
                     "choices": [choice]}
            yield "data: " + json.dumps(event, separators=(",", ":")) + "\n\n"
            await asyncio.sleep(delay)
        if (body.get("stream_options") or {}).get("include_usage"):
            event = {"id": rid, "object": obj, "created": 1700000000, "model": model,
                     "choices": [], "usage": usage(n)}
            yield "data: " + json.dumps(event, separators=(",", ":")) + "\n\n"
        yield "data: [DONE]\n\n"
    except (asyncio.CancelledError, GeneratorExit):
        STATE["disconnects"].append(time.monotonic_ns())
        raise


async def complete(request: Request, chat: bool):
    raw = await request.body()
    try:
        body = json.loads(raw)
        assert isinstance(body, dict)
    except Exception:
        return JSONResponse(status_code=400, content={"error": {
            "message": "body is not a JSON object", "type": "invalid_request_error",
            "param": None, "code": None}})
    if body.get("model") == "slow-headers":
        await asyncio.sleep(5)
    if body.get("stream"):
        return StreamingResponse(generate(request, body, chat), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Upstream": "fastapi"})
    n = int(body.get("max_tokens") or 8)
    text = "".join(words(body, n))
    message = {"role": "assistant", "content": text}
    if reasoning(body):
        message["reasoning_content"] = "".join(reasoning(body))
    calls = tool_calls(body) if chat else []
    if calls:
        message["content"] = None
        message["tool_calls"] = [{"id": f"call_{k}", "type": "function",
                                  "function": {"name": name, "arguments": args}}
                                 for k, (name, args) in enumerate(calls)]
    choice = ({"index": 0, "message": message, "logprobs": None,
               "finish_reason": "tool_calls" if calls else "length"} if chat else
              {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"})
    return JSONResponse({"id": ("chatcmpl-" if chat else "cmpl-") + "fastapi",
                         "object": "chat.completion" if chat else "text_completion",
                         "created": 1700000000, "model": body.get("model", "fastapi"),
                         "choices": [choice], "usage": usage(n)},
                        headers={"X-Upstream": "fastapi"})


@app.post("/v1/chat/completions")
async def chat(request: Request):
    return await complete(request, True)


@app.post("/v1/completions")
async def completions(request: Request):
    return await complete(request, False)


def sse(event_type, data):
    return f"event: {event_type}\ndata: " + json.dumps(data, separators=(",", ":")) + "\n\n"


# The Responses API: a response object's output items for `body`, and its usage.
def responses_output(body):
    n = int(body.get("max_output_tokens") or 8)
    items = []
    if reasoning(body):
        items.append({"id": "rs_fastapi", "type": "reasoning", "summary": [], "content": [
            {"type": "reasoning_text", "text": "".join(reasoning(body))}]})
    tools = [{"function": {"name": t.get("name", f"tool{i}")}} for i, t in enumerate(body.get("tools") or [])]
    calls = tool_calls({"tools": tools})
    for k, (name, args) in enumerate(calls):
        items.append({"id": f"fc_{k}", "type": "function_call", "call_id": f"call_{k}",
                      "name": name, "arguments": args, "status": "completed"})
    if not calls:
        items.append({"id": "msg_fastapi", "type": "message", "role": "assistant",
                      "status": "completed", "content": [
                          {"type": "output_text", "text": "".join(words(body, n)),
                           "annotations": [], "logprobs": []}]})
    return items, (0 if calls else n)


def response_object(body, status, output, n):
    return {"id": "resp_fastapi", "object": "response", "created_at": 1700000000,
            "model": body.get("model", "fastapi"), "status": status,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "output": output,
            "usage": None if status == "in_progress" else
            {"input_tokens": 5, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": n,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 5 + n}}


async def responses_stream(body):
    items, n = responses_output(body)
    status = "completed" if any(i["type"] == "function_call" for i in items) else "incomplete"
    seq = iter(range(10**6))
    head = response_object(body, "in_progress", [], 0)
    yield sse("response.created", {"type": "response.created", "sequence_number": next(seq), "response": head})
    yield sse("response.in_progress", {"type": "response.in_progress", "sequence_number": next(seq), "response": head})
    for index, item in enumerate(items):
        empty = dict(item)
        if item["type"] == "function_call":
            empty["arguments"] = ""
        elif item["type"] == "message":
            empty["content"] = []
        else:
            empty["content"] = []
        yield sse("response.output_item.added", {"type": "response.output_item.added", "sequence_number": next(seq),
                                                 "output_index": index, "item": empty})
        if item["type"] == "function_call":
            for piece in fragments(item["arguments"]):
                yield sse("response.function_call_arguments.delta", {
                    "type": "response.function_call_arguments.delta", "sequence_number": next(seq),
                    "item_id": item["id"], "output_index": index, "delta": piece})
                await asyncio.sleep(0.001)
        else:
            kind = "reasoning_text" if item["type"] == "reasoning" else "output_text"
            pieces = reasoning(body) if item["type"] == "reasoning" else words(body, n)
            for piece in pieces:
                yield sse(f"response.{kind}.delta", {
                    "type": f"response.{kind}.delta", "sequence_number": next(seq), "item_id": item["id"],
                    "output_index": index, "content_index": 0, "delta": piece, "logprobs": []})
                await asyncio.sleep(0.001)
        yield sse("response.output_item.done", {"type": "response.output_item.done", "sequence_number": next(seq),
                                                "output_index": index, "item": item})
    done = response_object(body, status, items, n)
    yield sse("response.completed", {"type": "response.completed", "sequence_number": next(seq), "response": done})


@app.post("/v1/responses")
async def responses(request: Request):
    body = json.loads(await request.body())
    if body.get("stream"):
        return StreamingResponse(responses_stream(body), media_type="text/event-stream")
    items, n = responses_output(body)
    status = "completed" if any(i["type"] == "function_call" for i in items) else "incomplete"
    return JSONResponse(response_object(body, status, items, n))


# Anthropic's Messages API: the content blocks answering `body`, and the stop reason.
def messages_content(body):
    n = int(body.get("max_tokens") or 8)
    blocks = []
    if reasoning(body):
        blocks.append({"type": "thinking", "thinking": "".join(reasoning(body)), "signature": ""})
    tools = [{"function": {"name": t.get("name", f"tool{i}")}} for i, t in enumerate(body.get("tools") or [])]
    calls = tool_calls({"tools": tools})
    for k, (name, args) in enumerate(calls):
        blocks.append({"type": "tool_use", "id": f"toolu_{k}", "name": name, "input": json.loads(args)})
    if not calls:
        blocks.append({"type": "text", "text": "".join(words(body, n))})
    return blocks, ("tool_use" if calls else "max_tokens"), (0 if calls else n)


async def messages_stream(body):
    blocks, stop, n = messages_content(body)
    message = {"id": "msg_fastapi", "type": "message", "role": "assistant", "model": body.get("model", "fastapi"),
               "content": [], "stop_reason": None, "stop_sequence": None,
               "usage": {"input_tokens": 3, "cache_read_input_tokens": 2, "output_tokens": 1}}
    yield sse("message_start", {"type": "message_start", "message": message})
    for index, block in enumerate(blocks):
        if block["type"] == "tool_use":
            start = dict(block, input={})
            pieces, delta = fragments(json.dumps(block["input"])), "input_json_delta"
        elif block["type"] == "thinking":
            start = dict(block, thinking="")
            pieces, delta = reasoning(body), "thinking_delta"
        else:
            start = dict(block, text="")
            pieces, delta = words(body, n), "text_delta"
        yield sse("content_block_start", {"type": "content_block_start", "index": index, "content_block": start})
        yield "event: ping\ndata: {\"type\":\"ping\"}\n\n"
        field = {"input_json_delta": "partial_json", "thinking_delta": "thinking", "text_delta": "text"}[delta]
        for piece in pieces:
            yield sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                              "delta": {"type": delta, field: piece}})
            await asyncio.sleep(0.001)
        yield sse("content_block_stop", {"type": "content_block_stop", "index": index})
    yield sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                "usage": {"output_tokens": n}})
    yield sse("message_stop", {"type": "message_stop"})


@app.post("/v1/messages")
async def messages(request: Request):
    body = json.loads(await request.body())
    if body.get("stream"):
        return StreamingResponse(messages_stream(body), media_type="text/event-stream")
    blocks, stop, n = messages_content(body)
    return JSONResponse({"id": "msg_fastapi", "type": "message", "role": "assistant",
                         "model": body.get("model", "fastapi"), "content": blocks, "stop_reason": stop,
                         "stop_sequence": None,
                         "usage": {"input_tokens": 3, "cache_read_input_tokens": 2, "output_tokens": n}})


@app.get("/v1/models")
async def models():
    return {"object": "list", "data": [{"id": "fastapi", "object": "model"}]}


@app.get("/health")
async def health():
    return Response(status_code=200)


if __name__ == "__main__":
    # IPPROTO_TCP named, and the socket itself handed over (an fd is taken for a Unix socket):
    # else asyncio leaves TCP_NODELAY off on the connections, as uvicorn listening on a host and
    # port does not, and a response's head and body (two writes) wait ~40 ms for the peer's
    # delayed ACK on a reused connection.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)  # before the port is printed, so that nobody is refused
    print(f"upstream listening on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])
