"""The middleware reads NIM_CAPTURE_ENABLE / NIM_CAPTURE_ARGS exactly as `llmtap proxy` does: for
each environment below, both print the same warnings and errors (timestamps aside) and agree on
whether capture is on.

Run: python3 config_test.py LLMTAP_BINARY PYTHONPATH_DIR"""

import json
import os
import re
import subprocess
import sys
import tempfile

llmtap, pythonpath = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
tmp = tempfile.mkdtemp()
path = os.path.join(tmp, "c", "requests.jsonl")
DIAGNOSTIC = re.compile(r"^\S+ llmtap (error|warning): (.*)$")

CASES = [
    {},  # capture off by default
    {"NIM_CAPTURE_ARGS": json.dumps({"path": path})},  # ARGS alone: still off
    {"NIM_CAPTURE_ENABLE": "1", "NIM_CAPTURE_ARGS": json.dumps({"path": path})},
    {"NIM_CAPTURE_ENABLE": "yes", "NIM_CAPTURE_ARGS": json.dumps({"path": path})},
    {"NIM_CAPTURE_ENABLE": "1", "NIM_CAPTURE_ARGS": '{"path": "%s"' % path},  # invalid JSON
    {"NIM_CAPTURE_ENABLE": "1", "NIM_CAPTURE_ARGS": json.dumps([path])},  # not an object
    {"NIM_CAPTURE_ENABLE": "1",
     "NIM_CAPTURE_ARGS": json.dumps({"path": path, "sample_rate": 5, "bogus": 1,
                                     "max_request_bytes": -2, "format": "csv"})},
    {"NIM_CAPTURE_ENABLE": "1",
     "NIM_CAPTURE_ARGS": json.dumps({"path": path, "endpoint_pattern": "(", "outcomes": "yes"})},
]

MIDDLEWARE = """
import sys
from llmtap.asgi import CaptureMiddleware
async def app(scope, receive, send):
    pass
m = CaptureMiddleware(app, file_tag="")
m.start()
m.stop()
print("enabled" if m.capture.enabled else "disabled")
"""


def diagnostics(stderr):
    return [m.group(1) + ": " + m.group(2) for m in map(DIAGNOSTIC.match, stderr.splitlines()) if m]


def base_env(case):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NIM_CAPTURE")}
    env.update(case)
    return env


failures = 0
for case in CASES:
    env = base_env(case)
    proxy = subprocess.Popen([llmtap, "proxy", "--listen", "127.0.0.1:0"], env=env, cwd=tmp,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proxy.stdout.readline()
    while line and "listening on" not in line:
        line = proxy.stdout.readline()
    proxy.terminate()
    out, err = proxy.communicate(timeout=120)  # a guard against a hang only
    proxy_on = "capture on" in line
    env["PYTHONPATH"] = pythonpath
    mw = subprocess.run([sys.executable, "-c", MIDDLEWARE], env=env, cwd=tmp, capture_output=True,
                        text=True, timeout=120)
    if mw.returncode != 0:
        print(f"FAIL {case}: the middleware exited {mw.returncode}: {mw.stderr}")
        failures += 1
        continue
    mw_on = mw.stdout.strip() == "enabled"
    if proxy_on != mw_on or diagnostics(err) != diagnostics(mw.stderr):
        print(f"FAIL {case}:\n  proxy: capture {'on' if proxy_on else 'off'}, {diagnostics(err)}"
              f"\n  middleware: capture {'on' if mw_on else 'off'}, {diagnostics(mw.stderr)}")
        failures += 1
    else:
        print(f"ok: capture {'on ' if mw_on else 'off'}, {len(diagnostics(err))} diagnostics: {case}")

subprocess.run(["rm", "-rf", tmp])
sys.exit(1 if failures else 0)
