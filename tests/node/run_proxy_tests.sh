#!/usr/bin/env bash
# run_proxy_tests.sh LLMTAP_BINARY [TEST_FILE...]: the `llmtap proxy` integration tests (node
# --test; default every file below, one at a time: CTest runs them one file per test, side by
# side). Each test starts its own processes (llmtap sim, llmtap proxy, the FastAPI upstream in
# tests/upstream) on free loopback ports and stops them by PID.
set -euo pipefail
source "$(dirname "$0")/common.sh" "$1"
# The Debian python3-fastapi / python3-uvicorn packages live in the system interpreter.
python=/usr/bin/python3
if ! "$python" -c 'import fastapi, uvicorn' 2>/dev/null; then
  echo "run_proxy_tests: $python lacks fastapi/uvicorn; run scripts/setup.sh" >&2
  exit 1
fi
cd "$here"
files=("${@:2}")
if ((${#files[@]} == 0)); then
  files=(proxy.test.mjs proxy_upstream.test.mjs proxy_outcomes.test.mjs proxy_responses.test.mjs proxy_apis.test.mjs
    proxy_sessions.test.mjs sessions_infer.test.mjs sessions_responses.test.mjs proxy_timeouts.test.mjs
    proxy_report_shapes.test.mjs)
fi
LLMTAP_BIN="$llmtap" LLMTAP_PYTHON="$python" node --test --test-reporter=spec "${files[@]}"
