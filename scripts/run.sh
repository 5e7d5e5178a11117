#!/usr/bin/env bash
# The README's first command: set up, build, and run the main job. It installs only what building
# llmtap needs and builds only the `llmtap` binary; the test command (scripts/test.sh) installs
# and builds the rest in the same build directory.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
scripts/setup.sh --build-only
echo "llmtap: packages ready after $((SECONDS - start)) s; building build/llmtap"
BUILD_TARGET=llmtap scripts/build.sh build -DLLMTAP_BUILD_TESTS=OFF -DLLMTAP_BUILD_BENCH=OFF \
  -DLLMTAP_UNITY_BUILD=ON
mkdir -p captures
# The main job: the capture proxy on 127.0.0.1:8001 in front of the built-in simulator (no
# --upstream), capturing into ./captures/. Try it from another shell:
#   curl -N localhost:8001/v1/chat/completions -d '{"messages":[{"role":"user","content":"hi"}],"stream":true}'
# Ctrl-C (or SIGTERM) drains the capture and writes its manifest.
# (`build/llmtap capture-demo --path ./captures/requests.jsonl` still shows the capture core alone.)
echo "llmtap: built build/llmtap after $((SECONDS - start)) s; running the capture proxy on 127.0.0.1:8001 into ./captures/"
export NIM_CAPTURE_ENABLE=1
export NIM_CAPTURE_ARGS='{"path":"./captures/requests.jsonl"}'
exec build/llmtap proxy --listen 127.0.0.1:8001 "$@"
