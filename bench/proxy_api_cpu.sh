#!/usr/bin/env bash
# proxy_api_cpu.sh [BUILD_DIR] [ROUNDS] [REQUESTS] [CONCURRENCY]: the proxy's CPU per request for
# each API (issue #34), chat as the peer, in one run. One `llmtap proxy --capture
# --capture-responses --endpoint-pattern '.*'` (one thread, CPU $PROXY_CPU, default 0) in front of
# `llmtap sim` (CPU $LOAD_CPU, default 1; no decode delay); bench/proxy_api_load.mjs sends REQUESTS
# requests (default 2000) of one API at a time, CONCURRENCY in flight (default 32), the APIs
# interleaved in each of ROUNDS rounds (default 3). Prints, per API, the proxy's CPU microseconds
# per request (utime + stime from /proc, the median of the rounds) and its ratio to chat's, then
# checks the outcomes sidecar: every generation request has its tokens and text.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-3}
requests=${3:-2000}
concurrency=${4:-32}
max_tokens=${MAX_TOKENS:-20}
proxy_cpu=${PROXY_CPU:-0}
load_cpu=${LOAD_CPU:-1}
llmtap=$(realpath "$build/llmtap")
apis=(chat responses messages embeddings rerank)

# shellcheck source=tests/lib/background.sh
. tests/lib/background.sh  # work, pids, wait_port, cpu_ticks


taskset -c "$load_cpu" "$llmtap" sim --listen 127.0.0.1:0 --served-model-name m --threads 1 \
  --ttft-ms 0 --prefill-us-per-token 0 --itl-ms 0 --itl-jitter-ms 0 >"$work/sim.out" 2>&1 &
pids+=($!)
sim_port=$(wait_port "$work/sim.out")
[[ -n "$sim_port" ]] || { cat "$work/sim.out" >&2; exit 1; }
taskset -c "$proxy_cpu" "$llmtap" proxy --listen 127.0.0.1:0 --threads 1 \
  --upstream "http://127.0.0.1:$sim_port" --capture --capture-path "$work/c/requests.jsonl" \
  --capture-responses --endpoint-pattern '.*' >"$work/proxy.out" 2>&1 &
proxy=$!
pids+=($proxy)
port=$(wait_port "$work/proxy.out")
[[ -n "$port" ]] || { cat "$work/proxy.out" >&2; exit 1; }

hz=$(getconf CLK_TCK)
declare -A samples
echo "== $rounds rounds x $requests requests per API, $concurrency in flight, max_tokens $max_tokens; proxy on CPU $proxy_cpu, sim and client on CPU $load_cpu"
node bench/proxy_api_load.mjs "127.0.0.1:$port" chat 200 "$concurrency" "$max_tokens"  # warm-up
for ((r = 1; r <= rounds; ++r)); do
  for api in "${apis[@]}"; do
    before=$(cpu_ticks "$proxy")
    taskset -c "$load_cpu" node bench/proxy_api_load.mjs "127.0.0.1:$port" "$api" "$requests" \
      "$concurrency" "$max_tokens"
    after=$(cpu_ticks "$proxy")
    samples[$api]+="$(awk -v t=$((after - before)) -v hz="$hz" -v n="$requests" \
      'BEGIN {printf "%.1f", t / hz / n * 1e6}') "
  done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
chat=$(median <<<"${samples[chat]}")
printf '%-11s %12s %8s   %s\n' API "us/request" "vs chat" "rounds"
for api in "${apis[@]}"; do
  m=$(median <<<"${samples[$api]}")
  printf '%-11s %12s %8s   %s\n' "$api" "$m" "$(awk -v a="$m" -v b="$chat" 'BEGIN {printf "%.2fx", a / b}')" "${samples[$api]}"
done

kill "$proxy"
wait "$proxy" || true
python3 - "$work/c/requests.jsonl" <<'PY'
import json, sys
path = sys.argv[1]
rows = [json.loads(l) for l in open(path)]
outcomes = {o["line"]: o for o in map(json.loads, open(path + ".outcomes.ndjson"))}
by_api = {}
for i, row in enumerate(rows, 1):
    api = row.get("endpoint_type", "chat")
    o = outcomes[i]
    by_api[api] = by_api.get(api, 0) + 1
    assert o["status"] == 200 and o["prompt_tokens"] is not None, (api, o)
    if api in ("chat", "responses", "messages"):
        assert o["completion_tokens"] is not None and o["response"]["text"], (api, o)
print("outcomes checked:", ", ".join(f"{k} {v}" for k, v in sorted(by_api.items())))
PY
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
