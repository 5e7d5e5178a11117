#!/usr/bin/env bash
# replay_lag.sh [BUILD_DIR] [RATE] [REQUESTS] [ARRIVAL] [THREADS]: schedule lag of `llmtap replay` against
# `llmtap sim` (fast timings: 1 ms to first token, 8 tokens 0.5 ms apart, streamed). Sends
# REQUESTS (default 20000) chat and completion requests at RATE req/s (default 2000, i.e. 10 s)
# with ARRIVAL poisson (default) or constant arrivals, on THREADS replay event loops (default:
# one per core), then prints lag p50/p99/max and the
# request counts from summary.json. Goal (issue #7): lag p99 < 1 ms at 2,000 req/s.
#
# SESSIONS=S (issue 16): the same requests as mooncake_payload rows with timestamps (ARRIVAL's
# gaps at RATE) replayed on those timestamps twice in one go, first with a session_id on every
# row (row i a turn of session i % S, so a session's turns are S rows apart and each goes
# through the causal gate) and then the same rows without one, and prints both lags.
#
# TLS=1 (issue 18): the replay speaks https to an nginx terminating TLS in front of the sim
# (tests/node/tls_nginx.mjs, test CA, keep-alive), so the lag includes TLS on every write.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rate=${2:-2000}
requests=${3:-20000}
arrival=${4:-poisson}
threads=${5:-0}
[[ -x "$build/llmtap" ]] || { echo "build $build first (target llmtap)" >&2; exit 1; }
ulimit -n "$(ulimit -Hn)"
work=$(mktemp -d)
pid=
ngx_pid=
cleanup() {
  [[ -n "$ngx_pid" ]] && kill "$ngx_pid" 2>/dev/null && wait "$ngx_pid" 2>/dev/null
  [[ -n "$pid" ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

"$build/llmtap" sim --listen 127.0.0.1:0 --served-model-name m --threads 1 --ttft-ms 1 --prefill-us-per-token 1 \
  --itl-ms 0.5 --itl-jitter-ms 0 --spec-tokens 0 >"$work/sim.out" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q listening "$work/sim.out" && break; sleep 0.05; done
port=$(sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/sim.out" | head -1)
url="http://127.0.0.1:$port"
tls_args=()
if [[ "${TLS:-0}" == 1 ]]; then
  node tests/node/tls_nginx.mjs "$port" >"$work/nginx.json" 2>"$work/nginx.err" &
  ngx_pid=$!
  for _ in $(seq 100); do [[ -s "$work/nginx.json" ]] && break; sleep 0.05; done
  [[ -s "$work/nginx.json" ]] || { cat "$work/nginx.err" >&2; exit 1; }
  url="https://localhost:$(jq -r .ports.ok "$work/nginx.json")"
  tls_args=(--cacert "$(jq -r .caFile "$work/nginx.json")")
fi

# raw_payload rows, alternating chat (streamed with usage) and completions (streamed).
awk -v n="$requests" 'BEGIN {
  for (i = 0; i < n; i++) {
    if (i % 2 == 0)
      printf "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"request %d: tell me about rivers\"}],\"max_tokens\":8,\"stream\":true,\"stream_options\":{\"include_usage\":true}}\n", i
    else
      printf "{\"model\":\"m\",\"prompt\":\"request %d: once upon a time\",\"max_tokens\":8,\"stream\":true,\"stream_options\":{\"include_usage\":true}}\n", i
  }
}' >"$work/trace.jsonl"

# run_replay LABEL TRACE SCHEDULE_ARGS...: one replay, its lag.
run_replay() {
  local label=$1 trace=$2
  shift 2
  cmd=("$build/llmtap" replay "$trace" --url "$url" "${tls_args[@]}" "$@" --threads "$threads"
       ${REPLAY_ARGS:-} --out "$work/out-$label")
  echo "== $label"
  echo "command: ${cmd[*]}"
  echo "cores: $(nproc); sim: 1 thread${ngx_pid:+; nginx: 1 worker terminating TLS}; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  /usr/bin/time -f "replay process: %U s user, %S s system, %M KB max RSS" "${cmd[@]}" \
    >"$work/replay.out" 2>"$work/replay.err" || { cat "$work/replay.out" "$work/replay.err"; exit 1; }
  tail -1 "$work/replay.err"
  grep '^sessions' "$work/replay.out" || true
  jq -r 'def r: if . == null then null else (. * 1000 | round) / 1000 end;
    "requests: \(.requests.sent) sent, \(.requests.completed) completed, \(.requests.errors) errors; measured \(.duration_s | r) s, \(.throughput.requests_per_s | r) req/s",
    "lag_ms: p50 \(.metrics.lag_ms.p50 | r)  p90 \(.metrics.lag_ms.p90 | r)  p99 \(.metrics.lag_ms.p99 | r)  max \(.metrics.lag_ms.max | r)  mean \(.metrics.lag_ms.mean | r)",
    "ttft_ms: p50 \(.metrics.ttft_ms.p50 | r)  p99 \(.metrics.ttft_ms.p99 | r); latency_ms: p50 \(.metrics.latency_ms.p50 | r)  p99 \(.metrics.latency_ms.p99 | r)"' \
    "$work/out-$label/summary.json"
  jq -r '.lag_ms' "$work/out-$label/requests.jsonl" | awk '$1 > 1 { a++ } $1 > 5 { b++ } END {
    printf "lag > 1 ms: %d of %d requests; > 5 ms: %d\n", a, NR, b }'
  echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
}

if [[ -z "${SESSIONS:-}" ]]; then
  run_replay rate "$work/trace.jsonl" --rate "$rate" --arrival "$arrival" --seed 1
  exit 0
fi

# The same requests as timestamped rows (ms, 3 decimals) at RATE with ARRIVAL gaps, with a
# session_id and without.
awk -v rate="$rate" -v arrival="$arrival" -v s="$SESSIONS" -v dir="$work" 'BEGIN { srand(1) }
{
  printf "{\"timestamp\":%.3f,\"payload\":%s,\"session_id\":\"session-%d\"}\n", t, $0, (NR - 1) % s > (dir "/sessions.jsonl")
  printf "{\"timestamp\":%.3f,\"payload\":%s}\n", t, $0 > (dir "/plain.jsonl")
  t += arrival == "constant" ? 1000 / rate : -log(1 - rand()) * 1000 / rate
}' "$work/trace.jsonl"
run_replay sessions "$work/sessions.jsonl"
run_replay no-sessions "$work/plain.jsonl"
