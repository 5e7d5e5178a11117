#!/usr/bin/env bash
# run_asgi_tests.sh LLMTAP_BINARY PYTHONPATH_DIR: the integration tests of the in-process
# capture (llmtap.asgi.CaptureMiddleware; asgi.test.mjs). PYTHONPATH_DIR holds the built
# package (llmtap/ with llmtap._native) and the test-only _llmtap_fault module: the build
# tree's python/. Each test starts its own processes (FastAPI + uvicorn with the middleware,
# tests/python/asgi_app.py; llmtap proxy in front of the plain FastAPI upstream,
# tests/upstream/app.py) on free loopback ports and stops them by PID.
set -euo pipefail
source "$(dirname "$0")/common.sh" "$1"
pythonpath=$(realpath "$2")
# The Debian python3-fastapi / python3-uvicorn packages live in the system interpreter.
python=/usr/bin/python3
if ! "$python" -c 'import fastapi, uvicorn' 2>/dev/null; then
  echo "run_asgi_tests: $python lacks fastapi/uvicorn; run scripts/setup.sh" >&2
  exit 1
fi
if ! PYTHONPATH="$pythonpath" "$python" -c 'import llmtap._native, _llmtap_fault' 2>/dev/null; then
  echo "run_asgi_tests: llmtap._native or _llmtap_fault is not built in $pythonpath" >&2
  exit 1
fi
cd "$here"
LLMTAP_BIN="$llmtap" LLMTAP_PYTHON="$python" LLMTAP_PYTHONPATH="$pythonpath" \
  node --test --test-reporter=spec asgi.test.mjs asgi_responses.test.mjs http_framing_asgi.test.mjs
