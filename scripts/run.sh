#!/usr/bin/env bash
# The README's first command: set up, build, and run the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
mkdir -p captures
echo "llmtap: built build/llmtap; running the capture demonstration into ./captures/"
exec build/llmtap capture-demo --path ./captures/requests.jsonl "$@"
