#!/usr/bin/env python3
"""stub_server.py PORT_FILE BODIES_JSONL: a minimal OpenAI-style server for llmtap replay.

Listens on a free loopback port (written to PORT_FILE), appends each POSTed request body to
BODIES_JSONL (one JSON line each, in arrival order) and answers every chat or completions
request with the same 8-word text AIPerf's referee stores as a session's answer
(tests/aiperf/referee/aiperf_load.py: "w " * 8), so the two replays compare turn by turn.
"""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ANSWER = "w " * 8
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, obj):
        data = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.reply({"object": "list", "data": [{"id": "m", "object": "model"}]})

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with lock, open(sys.argv[2], "ab") as f:
            f.write(body.replace(b"\n", b" ") + b"\n")
        req = json.loads(body)
        if "messages" in req:
            choice = {"index": 0, "message": {"role": "assistant", "content": ANSWER},
                      "finish_reason": "length"}
        else:
            choice = {"index": 0, "text": ANSWER, "finish_reason": "length"}
        self.reply({"object": "chat.completion", "choices": [choice],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 8, "total_tokens": 9}})


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(sys.argv[1], "w") as f:
    f.write(str(server.server_address[1]))
server.serve_forever()
