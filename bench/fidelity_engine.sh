#!/usr/bin/env bash
# fidelity_engine.sh [BUILD_DIR] [RUNS] [SLOTS]: the replay-fidelity certificate against llama.cpp's real
# llama-server with every metric gated (issue 46). Runs tests/node/engine_fidelity.test.mjs RUNS
# times (default 3) with FIDELITY_FULL=1: each run captures a 36-request multi-turn workload in
# front of a fresh llama-server (--parallel 1, pinned to CPU 1; proxy, client and replay on CPU 0),
# replays it to two fresh servers (A, B) and judges A with B as the A/A floor (all 11 metrics
# gated: tokens, finish reasons, failures, cache hit rate, the server's prompt and decode time,
# TTFT, ITL, latency), then a replay to a server with prompt caching off with the floor of A and B
# (must not certify). Prints each run's two certificates (the console rendering) and a line
# "run K: A <verdict>, caching off <verdict>"; the runs are kept under $TMPDIR/fidelity-engine.
# SLOTS (default 1) sets every server's --parallel: with 4, slot assignment races between sessions
# and the cache hit rate of two fresh servers differs by up to 10 points (the test's 2-point
# assertion may then fail; the verdicts are printed all the same).
# Run it on a quiet machine: client-side timings on 2 shared cores move with any neighbour.
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
runs=${2:-3}
slots=${3:-1}
root=${TMPDIR:-/tmp}/fidelity-engine
rm -rf "$root"
for k in $(seq 1 "$runs"); do
  dir=$root/run-$k
  mkdir -p "$dir"
  if LLMTAP_BIN=$build/llmtap FIDELITY_FULL=1 FIDELITY_KEEP=$dir FIDELITY_SLOTS=$slots \
    node --test --test-reporter=spec tests/node/engine_fidelity.test.mjs >"$dir/test.log" 2>&1; then
    status=passed
  else
    status=FAILED
  fi
  grep -E '^(fidelity|  all|    [a-z_]+ )' "$dir/test.log" | sed 's/^/  /' || true
  a=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["verdict"])' "$dir/a/fidelity.json" 2>/dev/null || echo none)
  off=$("$build/llmtap" fidelity "$dir/nocache" "$dir/a" "$dir/b" --json --no-write 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["verdict"])' || echo none)
  echo "run $k: test $status; A (floor B): $a; caching off (floor A, B): $off"
done
