#!/usr/bin/env bash
# capture_responses_sse.sh [BUILD_DIR] [ROUNDS] [STREAMS] [MAX_TOKENS]: what capture_responses
# costs a stream, side by side in one run. bench/proxy_sse_latency.py (the SSE latency benchmark
# of proxy_vs_nginx.sh, same set-up: a sim with a fixed 2 ms decode step on CPU $LOAD_CPU (1),
# the proxies with one thread each on CPU $PROXY_CPU (0), the client beside them) measures the
# TTFT and per-chunk latency each target adds over the sim itself:
#   outcomes   llmtap proxy --capture --outcomes             (the usage scanner reads usage only)
#   responses  llmtap proxy --capture --capture-responses    (it also collects the text)
#   off        llmtap proxy --no-capture
# STREAMS streams per target and round (default 200), interleaved one to each target in turn;
# MAX_TOKENS tokens each (default 20: 22 SSE events). Prints the latency report, the CPU time
# each proxy process spent, and checks that every response's text reached the outcomes sidecar.
# ORDER (default "outcomes responses off") orders the targets in proxy_sse_latency.py's list.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-5}
streams=${3:-200}
max_tokens=${4:-20}
proxy_cpu=${PROXY_CPU:-0}
load_cpu=${LOAD_CPU:-1}
llmtap=$(realpath "$build/llmtap")

# shellcheck source=tests/lib/background.sh
. tests/lib/background.sh

wait_port() {  # wait_port FILE -> the port of "listening on http://127.0.0.1:PORT"
  local _
  for _ in $(seq 200); do grep -q 'listening on' "$1" 2>/dev/null && break; sleep 0.05; done
  sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$1" | head -1
}
cpu_seconds() {  # cpu_seconds PID -> utime + stime in seconds
  awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$1/stat"
}

taskset -c "$load_cpu" "$llmtap" sim --listen 127.0.0.1:0 --served-model-name m --threads 1 \
  --ttft-ms 0 --prefill-us-per-token 0 --itl-ms 2 --itl-jitter-ms 0 --spec-tokens 0 \
  >"$work/sim.out" 2>&1 &
pids+=($!)
sim_port=$(wait_port "$work/sim.out")

names=(outcomes responses off)
declare -A port pid
start_proxy() {  # start_proxy NAME ARGS...
  local name=$1
  shift
  taskset -c "$proxy_cpu" "$llmtap" proxy --listen 127.0.0.1:0 --threads 1 \
    --upstream "http://127.0.0.1:$sim_port" "$@" >"$work/$name.out" 2>&1 &
  pid[$name]=$!
  pids+=($!)
  port[$name]=$(wait_port "$work/$name.out")
  [[ -n "${port[$name]}" ]] || { cat "$work/$name.out" >&2; exit 1; }
}
mkdir -p "$work/outcomes" "$work/responses"
start_proxy outcomes --capture --capture-path "$work/outcomes/requests.jsonl" --outcomes
start_proxy responses --capture --capture-path "$work/responses/requests.jsonl" --capture-responses
start_proxy off --no-capture

# A ~1 KB chat body, streamed.
python3 - "$max_tokens" >"$work/body.json" <<'PY'
import json, sys
text = " ".join(["the capture proxy forwards every request and records its body"] * 14)
json.dump({"model": "m", "messages": [{"role": "user", "content": text}],
           "max_tokens": int(sys.argv[1]), "stream": True}, sys.stdout, separators=(",", ":"))
PY

declare -A before
for n in "${names[@]}"; do before[$n]=$(cpu_seconds "${pid[$n]}"); done
echo "== $rounds rounds x $streams streams per target, max_tokens $max_tokens; proxies on CPU $proxy_cpu, sim on CPU $load_cpu, client on CPU $proxy_cpu"
targets=()
for n in ${ORDER:-${names[*]}}; do targets+=("$n=127.0.0.1:${port[$n]}"); done
taskset -c "$proxy_cpu" python3 bench/proxy_sse_latency.py --body "$work/body.json" \
  --requests "$streams" --rounds "$rounds" direct=127.0.0.1:"$sim_port" "${targets[@]}"
line="CPU seconds over the run:"
for n in "${names[@]}"; do
  line+=" $n $(awk -v a="$(cpu_seconds "${pid[$n]}")" -v b="${before[$n]}" 'BEGIN {printf "%.2f", a - b}')"
done
echo "$line"

# Every outcome of the responses proxy holds its text; the outcomes proxy's hold none.
for n in outcomes responses; do kill "${pid[$n]}"; wait "${pid[$n]}" || true; done
python3 - "$work" "$((rounds * streams))" <<'PY'
import json, sys
work, expected = sys.argv[1], int(sys.argv[2])
resp = [json.loads(l) for l in open(f"{work}/responses/requests.jsonl.outcomes.ndjson")]
plain = [json.loads(l) for l in open(f"{work}/outcomes/requests.jsonl.outcomes.ndjson")]
assert len(resp) >= expected and len(plain) >= expected, (len(resp), len(plain), expected)
assert all(o["response"]["text"] and not o["response"]["truncated"] for o in resp)
assert all("response" not in o for o in plain)
mean = sum(len(o["response"]["text"].encode()) for o in resp) / len(resp)
print(f"outcomes checked: {len(resp)} responses with text (mean {mean:.0f} bytes), {len(plain)} without")
PY
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
