#!/usr/bin/env bash
# replay_rss.sh [BUILD_DIR] [BYTES] [SPEEDUP]: peak memory of `llmtap replay` on a big trace.
# Generates a mooncake_payload capture of about BYTES bytes (default 4,000,000,000) with
# bench/trace_gen (seed 1: chat and completion bodies of a few KB, Poisson arrivals at ~40
# requests/s), its max_tokens set to 4 so that the simulator answers each request in
# microseconds, then replays it with --speedup SPEEDUP (default 50: ~2,000 requests/s, which
# the simulator on one thread keeps up with on 2 cores; about 7 minutes for 4 GB) against
# `llmtap sim` (on 127.0.0.1, a free port, stopped by PID) with --out, and prints the replay
# process's maximum RSS (/usr/bin/time) next to the trace's size and rows, its RSS every 10 s,
# and the run's figures from summary.json. Above what the simulator keeps up with, requests wait
# in flight (open loop) and memory measures that backlog, not the trace.
#
# TRACE=FILE replays FILE instead of generating one (to compare builds on the same trace);
# KEEP=1 keeps the generated trace (BUILD_DIR/bench-tmp/replay_rss_BYTES.jsonl) for that.
# When the disk lacks room for the trace and the run's outputs, the largest size that fits is
# used, and said.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
bytes=${2:-4000000000}
speedup=${3:-50}
llmtap=$build/llmtap
gen=$build/bench/trace_gen
[[ -x $llmtap ]] || { echo "replay_rss: $llmtap missing; build it first" >&2; exit 2; }
tmp=$build/bench-tmp
mkdir -p "$tmp"
work=$(mktemp -d "$tmp/replay_rss.XXXXXX")
sim_pid=
cleanup() {
  if [[ -n $sim_pid ]]; then kill "$sim_pid" 2>/dev/null || true; wait "$sim_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

trace=${TRACE:-}
if [[ -z $trace ]]; then
  [[ -x $gen ]] || { echo "replay_rss: $gen missing; build it first" >&2; exit 2; }
  # Room for the generated file and its rewritten copy (briefly both), and requests.jsonl.
  avail=$(( $(df --output=avail -B1 "$tmp" | tail -1) ))
  if (( bytes * 23 / 10 > avail )); then
    fit=$(( avail * 10 / 23 / 1000000 * 1000000 ))
    echo "replay_rss: $((avail / 1000000)) MB free in $tmp: not enough for $bytes bytes;" \
      "using $fit bytes (scale the figures)"
    bytes=$fit
  fi
  trace=$tmp/replay_rss_$bytes.jsonl
  if [[ ! -s $trace ]]; then
    "$gen" "$work/gen.jsonl" "$bytes" 1 >/dev/null
    sed -E 's/"max_tokens":[0-9]+/"max_tokens":4/' "$work/gen.jsonl" >"$trace"
    rm "$work/gen.jsonl"
  fi
  [[ ${KEEP:-0} == 1 ]] || trap 'cleanup; rm -f "$trace"' EXIT
fi
size=$(stat -c %s "$trace")
rows=$(wc -l <"$trace")
echo "trace: $trace, $size bytes, $rows rows"

"$llmtap" sim --listen 127.0.0.1:0 --any-model --threads 1 --ttft-ms 0 --prefill-us-per-token 0 --itl-ms 0 \
  --itl-jitter-ms 0 --spec-tokens 0 --cache-blocks 0 >"$work/sim.out" 2>&1 &
sim_pid=$!
for _ in $(seq 100); do grep -q listening "$work/sim.out" && break; sleep 0.05; done
port=$(sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/sim.out" | head -1)
[[ -n $port ]] || { cat "$work/sim.out"; exit 1; }

cmd=("$llmtap" replay "$trace" --url "http://127.0.0.1:$port" --speedup "$speedup"
     --server-metrics off --out "$work/out")
echo "command: ${cmd[*]}"
echo "cores: $(nproc); load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
SECONDS=0
/usr/bin/time -f "%M %U %S" -o "$work/time" "${cmd[@]}" >"$work/replay.out" 2>"$work/replay.err" &
time_pid=$!
samples=()
while kill -0 "$time_pid" 2>/dev/null; do
  sleep 10
  pid=$(pgrep -P "$time_pid" || true)
  [[ -n $pid ]] && samples+=("$(awk '/VmRSS/ { printf "%d", $2 / 1024 }' "/proc/$pid/status" 2>/dev/null)")
done
# Exit 1 (some requests failed) still measured the run; 2 is a usage or input error.
rc=0
wait "$time_pid" || rc=$?
(( rc <= 1 )) || { cat "$work/replay.out" "$work/replay.err"; exit 1; }
wall=$SECONDS
read -r max_kb user_s sys_s <"$work/time"
grep -E '^llmtap replay: .*rows|^wrote' "$work/replay.out" || true
echo "RSS every 10 s (MB): ${samples[*]}"
printf 'replay process: max RSS %d MB for a %d MB trace (%d rows); %d s wall, %s s user, %s s system; exit %d\n' \
  $((max_kb / 1024)) $((size / 1000000)) "$rows" "$wall" "$user_s" "$sys_s" "$rc"
jq -r 'def r: if . == null then null else (. * 1000 | round) / 1000 end;
  "requests: \(.requests.sent) sent, \(.requests.completed) completed, \(.requests.errors) errors; \(.throughput.requests_per_s | r) req/s",
  "lag_ms: p50 \(.metrics.lag_ms.p50 | r)  p99 \(.metrics.lag_ms.p99 | r)  max \(.metrics.lag_ms.max | r)"' \
  "$work/out/summary.json"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
