#!/usr/bin/env bash
# sim_sse_streams.sh [BUILD_DIR] [STREAMS...]: holds STREAMS concurrent SSE streams open against
# `llmtap sim` (each a chat completion of 20 tokens, one token a second, so every stream stays
# open about 20 s) and reports the server's resident memory per open stream, for each count.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
counts=("$@")
((${#counts[@]})) || counts=(1000 10000)
[[ -x "$build/llmtap" && -x "$build/bench/sim_sse_client" ]] ||
  { echo "build $build first (targets llmtap and sim_sse_client)" >&2; exit 1; }
# Each stream is one descriptor in the server and one in the client.
ulimit -n "$(ulimit -Hn)"
echo "open files limit: $(ulimit -n)"

for n in "${counts[@]}"; do
  work=$(mktemp -d)
  "$build/llmtap" sim --listen 127.0.0.1:0 --served-model-name m --threads 2 --ttft-ms 500 --itl-ms 1000 \
    --itl-jitter-ms 100 --spec-tokens 0 >"$work/sim.out" 2>&1 &
  pid=$!
  for _ in $(seq 100); do grep -q listening "$work/sim.out" && break; sleep 0.05; done
  port=$(sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/sim.out")
  echo "== $n streams"
  "$build/bench/sim_sse_client" --port "$port" --streams "$n" --max-tokens 20 --server-pid "$pid" || true
  curl -s "http://127.0.0.1:$port/v1/metrics" | grep -E '^(vllm:request_success_total|llmtap_sim_requests_aborted_total|llmtap_sim_open_connections)' || true
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  rm -rf "$work"
done
