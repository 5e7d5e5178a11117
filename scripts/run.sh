#!/usr/bin/env bash
# The README's first command: set up, build, and run the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
mkdir -p captures
# The main job: the capture proxy on 127.0.0.1:8001 in front of the built-in simulator (no
# --upstream), capturing into ./captures/. Try it from another shell:
#   curl -N localhost:8001/v1/chat/completions -d '{"messages":[{"role":"user","content":"hi"}],"stream":true}'
# Ctrl-C (or SIGTERM) drains the capture and writes its manifest.
# (`build/llmtap capture-demo --path ./captures/requests.jsonl` still shows the capture core alone.)
echo "llmtap: built build/llmtap; running the capture proxy on 127.0.0.1:8001 into ./captures/"
export NIM_CAPTURE_ENABLE=1
export NIM_CAPTURE_ARGS='{"path":"./captures/requests.jsonl"}'
exec build/llmtap proxy --listen 127.0.0.1:8001 "$@"
