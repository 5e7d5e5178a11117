#!/usr/bin/env bash
# soak.sh [MINUTES] [LLMTAP_BINARY]: a bounded soak of `llmtap proxy` with capture on.
#
# Runs `llmtap sim` (a fixed timing model, so the load is set by the sim's latency and the
# number of connections, not by the CPU) and `llmtap proxy` in front of it with capture,
# outcomes and size rotation on and max_queue_bytes set explicitly, then drives constant load
# with wrk (keep-alive connections; chat and completions, streaming and not, prompts of 0.5 to
# 6 KB) for MINUTES (default 10). Once a second a client also abandons a long stream, so the
# cancel path runs throughout. Every 5 s the proxy's VmRSS, open fds, threads and the counters
# of /llmtap/metrics go to a CSV. At the end (SIGTERM, drain) it checks:
#   1. max RSS <= max_queue_bytes + RSS_CONSTANT_MIB;
#   2. open fds flat after warm-up: max - min <= FD_SLACK;
#   3. errors do not grow after warm-up (upstream errors, 5xx, queue-full drops, write
#      failures, wrk socket errors, non-2xx), and every request is accounted for
#      (requests matched = recorded + counted drops; recorded = lines in the capture files);
# and prints a one-paragraph verdict. Exit 0 when all hold, 1 otherwise, 2 on a setup error.
# Environment knobs (defaults): SOAK_CONNECTIONS (16), SOAK_QUEUE_MIB (64), RSS_CONSTANT_MIB
# (64: the binary, thread stacks, per-connection buffers and allocator slack; measured at
# 14 MiB with an empty queue and 40 MiB above a full one), FD_SLACK (8), WARMUP_S (30),
# SOAK_SLOW_WRITE_US (unset; see below), SOAK_DIR (a new temp dir, removed at the end unless
# SOAK_KEEP=1), SOAK_CSV (copy the CSV here).
# Run it with `nice` on a shared machine: nice -n 10 tests/reliability/soak.sh 10 build/llmtap
set -euo pipefail

minutes=${1:-10}
bin=$(realpath "${2:-build/llmtap}")
conns=${SOAK_CONNECTIONS:-16}
queue_mib=${SOAK_QUEUE_MIB:-64}
rss_const_mib=${RSS_CONSTANT_MIB:-64}
fd_slack=${FD_SLACK:-8}
warmup_s=${WARMUP_S:-30}
interval_s=5
for tool in wrk curl awk; do
  command -v "$tool" >/dev/null || { echo "soak.sh: $tool is missing (apt-get install $tool)" >&2; exit 2; }
done
[[ -x "$bin" ]] || { echo "soak.sh: $bin is not an executable" >&2; exit 2; }

dir=${SOAK_DIR:-$(mktemp -d /tmp/llmtap-soak.XXXXXX)}
mkdir -p "$dir/captures"
csv="$dir/soak.csv"
sim_pid='' proxy_pid='' wrk_pid=''
finish() {
  for p in $wrk_pid $proxy_pid $sim_pid; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [[ -z "${SOAK_KEEP:-}" && -z "${SOAK_DIR:-}" ]]; then rm -rf "$dir"; fi
}
trap finish EXIT

# shellcheck source=tests/reliability/port_of.sh
. "$(dirname "$0")/port_of.sh"

"$bin" sim --listen 127.0.0.1:0 --served-model-name m --threads 2 --seed 1 --ttft-ms 5 --prefill-us-per-token 1 \
  --itl-ms 2 --itl-jitter-ms 0.5 --output-tokens-mean 32 --output-tokens-stddev 8 \
  >"$dir/sim.out" 2>"$dir/sim.out.err" &
sim_pid=$!
sim_port=$(port_of "$dir/sim.out" "$sim_pid")
queue_bytes=$((queue_mib << 20))
# With SOAK_SLOW_WRITE_US, every write of the capture writer is delayed that long (through
# the capture core's Env seam: llmtap_slow_disk, built next to llmtap; see disk_latency.sh),
# so the queue stays full: RSS then shows the queue's bound, and queue-full drops are
# expected (still counted exactly).
run=("$bin")
if [[ -n "${SOAK_SLOW_WRITE_US:-}" ]]; then
  run=("$(dirname "$bin")/llmtap_slow_disk" --write-delay-us "$SOAK_SLOW_WRITE_US")
  [[ -x "${run[0]}" ]] || { echo "soak.sh: ${run[0]} is missing (build the tests)" >&2; exit 2; }
fi
env -u NIM_CAPTURE_ENABLE -u NIM_CAPTURE_ARGS "${run[@]}" proxy --listen 127.0.0.1:0 --threads 2 \
  --upstream "http://127.0.0.1:$sim_port" --capture --capture-path "$dir/captures/requests.jsonl" \
  --outcomes --max-queue-bytes "$queue_bytes" --rotate-bytes $((32 << 20)) \
  >"$dir/proxy.out" 2>"$dir/proxy.out.err" &
proxy_pid=$!
proxy_port=$(port_of "$dir/proxy.out" "$proxy_pid")
base="http://127.0.0.1:$proxy_port"

# The load: four request shapes in turn, prompts of 0.5-6 KB (some sharing a prefix).
cat >"$dir/load.lua" <<'EOF'
local n = 0
local pad = {}
for i = 0, 11 do pad[i] = string.rep("lorem ipsum dolor sit amet ", 20 + i * 20) end
request = function()
  n = n + 1
  local p = pad[n % 12]
  local k = n % 4
  local path, body
  if k == 0 then
    path = "/v1/chat/completions"
    body = '{"model":"m","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"soak ' .. n .. ' ' .. p .. '"}]}'
  elseif k == 1 then
    path = "/v1/chat/completions"
    body = '{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"soak ' .. n .. ' ' .. p .. '"}]}'
  elseif k == 2 then
    path = "/v1/completions"
    body = '{"model":"m","prompt":"soak ' .. n .. ' ' .. p .. '"}'
  else
    path = "/v1/completions"
    body = '{"model":"m","stream":true,"prompt":"soak ' .. n .. ' ' .. p .. '"}'
  end
  return wrk.format("POST", path, {["Content-Type"] = "application/json"}, body)
end
EOF

metrics() { curl -sf --max-time 5 "$base/llmtap/metrics"; }
metric() { awk -v k="$1" '$1 == k { print $2; f = 1 } END { if (!f) print 0 }'; }
sample() {  # one CSV row
  local t=$1 m rss fds threads
  m=$(metrics || true)
  rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$proxy_pid/status")
  threads=$(awk '/^Threads:/ { print $2 }' "/proc/$proxy_pid/status")
  fds=$(ls "/proc/$proxy_pid/fd" | wc -l)
  local up=0 kind
  for kind in connect timeout reset protocol; do
    up=$((up + $(metric "llmtap_proxy_upstream_errors_total{kind=\"$kind\"}" <<<"$m")))
  done
  echo "$t,$rss,$fds,$threads,$(metric 'llmtap_proxy_requests_total{class="2xx"}' <<<"$m"),$(metric 'llmtap_proxy_requests_total{class="4xx"}' <<<"$m"),$(metric 'llmtap_proxy_requests_total{class="5xx"}' <<<"$m"),$(metric 'llmtap_proxy_requests_total{class="none"}' <<<"$m"),$up,$(metric llmtap_proxy_client_cancelled_total <<<"$m"),$(metric llmtap_capture_recorded_total <<<"$m"),$(metric llmtap_capture_dropped_queue_full_total <<<"$m"),$(metric llmtap_capture_write_failed_records_total <<<"$m"),$(metric llmtap_capture_queue_bytes <<<"$m"),$(metric llmtap_capture_files_rotated_total <<<"$m"),$(metric llmtap_proxy_client_connections <<<"$m")"
}
echo "t_s,rss_kib,fds,threads,req_2xx,req_4xx,req_5xx,req_none,upstream_errors,client_cancelled,recorded,dropped_queue_full,write_failed,queue_bytes,files_rotated,client_connections" >"$csv"

echo "soak: $minutes min, $conns connections, max_queue_bytes $queue_bytes, proxy pid $proxy_pid, dir $dir" >&2
sample 0 >>"$csv"
duration_s=$(awk -v m="$minutes" 'BEGIN { printf "%d", m * 60 }')
wrk -t2 -c"$conns" -d"${duration_s}s" --timeout 30s --latency -s "$dir/load.lua" "$base" >"$dir/wrk.out" 2>&1 &
wrk_pid=$!
start=$(date +%s)
next=$((start + interval_s))
cancels=0
while kill -0 "$wrk_pid" 2>/dev/null; do
  # A client that abandons a long stream after 50 ms.
  curl -s -o /dev/null --max-time 0.05 "$base/v1/chat/completions" \
    -d '{"model":"m","stream":true,"max_tokens":3000,"messages":[{"role":"user","content":"abandoned"}]}' || true
  cancels=$((cancels + 1))
  now=$(date +%s)
  if ((now >= next)); then
    sample $((now - start)) >>"$csv"
    next=$((next + interval_s))
  fi
  sleep 1
done
wait "$wrk_pid" || true
wrk_pid=''
sleep 1  # let the last cancelled streams end
sample $(($(date +%s) - start)) >>"$csv"
kill -TERM "$proxy_pid"
wait "$proxy_pid" && proxy_rc=0 || proxy_rc=$?
proxy_pid=''
[[ -n "${SOAK_CSV:-}" ]] && cp "$csv" "$SOAK_CSV"

# Lines in every capture file (rotated ones included); the final manifest's counters.
captures=$(ls "$dir"/captures/requests*.jsonl | grep -v '\.outcomes\.')
lines=$(cat $captures | grep -c '' || true)
files=$(wc -l <<<"$captures")
manifest="$dir/captures/requests.jsonl.manifest.json"
counter() { grep -oE "\"$1\": *[0-9]+" "$manifest" | head -1 | grep -oE '[0-9]+$'; }
matched=$(counter matched) recorded=$(counter recorded)
drops=0
for k in skipped_too_large sampled_out invalid_body non_standard_json dropped_queue_full write_failed_records queued_records; do
  drops=$((drops + $(counter "$k")))
done
wrk_requests=$(awk '/requests in/ { print $1 }' "$dir/wrk.out")
wrk_socket_errors=$(awk -F'[ ,]+' '/Socket errors/ { print $5 + $7 + $9 + $11 }' "$dir/wrk.out")
wrk_non2xx=$(awk '/Non-2xx/ { print $NF }' "$dir/wrk.out")
wrk_p50=$(awk '$1 == "50%" { print $2 }' "$dir/wrk.out")
wrk_p99=$(awk '$1 == "99%" { print $2 }' "$dir/wrk.out")

# The checks, over the CSV (rows after WARMUP_S).
slow=${SOAK_SLOW_WRITE_US:+1}
read -r verdict fails < <(awk -F, -v slow="${slow:-0}" -v dur="$duration_s" -v warm="$warmup_s" -v qb="$queue_bytes" -v c="$rss_const_mib" -v slack="$fd_slack" '
  NR == 1 { next }
  { rss = $2 / 1024; if (rss > rss_max) rss_max = rss; last_rss = rss }
  $1 >= warm && !w { w = 1; fd_min = $3; fd_max = $3; rss_w = rss
    for (i = 6; i <= 13; ++i) base[i] = $i }
  w && $1 < dur { if ($3 < fd_min) fd_min = $3; if ($3 > fd_max) fd_max = $3 }
  w { for (i in base) last[i] = $i; fd_end = $3 }
  END {
    bound = qb / 1048576 + c; fails = 0
    if (rss_max > bound) fails++
    if (fd_max - fd_min > slack) fails++
    grow = (last[7] - base[7]) + (last[9] - base[9]) + (last[13] - base[13])
    if (!slow) grow += last[12] - base[12]
    if (grow > 0) fails++
    printf "rss_max=%.1fMiB,bound=%.0fMiB,rss_after_warmup=%.1fMiB,rss_end=%.1fMiB,fds_under_load_min=%d,fds_under_load_max=%d,fds_after_load=%d,error_growth=%d %d\n",
      rss_max, bound, rss_w, last_rss, fd_min, fd_max, fd_end, grow, fails }' "$csv")
[[ "${wrk_socket_errors:-0}" -gt 0 || -n "$wrk_non2xx" ]] && fails=$((fails + 1))
[[ "$matched" -eq $((recorded + drops)) && "$recorded" -eq "$lines" && "$proxy_rc" -eq 0 ]] || fails=$((fails + 1))

ok=$([[ $fails -eq 0 ]] && echo PASS || echo FAIL)
echo "soak $ok: ${minutes} min at $conns connections, wrk sent ${wrk_requests:-?} requests (p50 ${wrk_p50:-?}, p99 ${wrk_p99:-?}; socket errors ${wrk_socket_errors:-0}, non-2xx ${wrk_non2xx:-0}) plus $cancels abandoned streams; ${verdict//,/, }; capture: $matched matched = $recorded recorded + $drops counted drops, $lines lines in $files files ($(grep -c '' "$csv") samples in $csv); proxy exit $proxy_rc. Checks: RSS max <= max_queue_bytes + ${rss_const_mib} MiB, fd max - min <= $fd_slack after ${warmup_s} s, no growth of upstream errors/5xx/queue-full/write-failed after warm-up, no wrk errors, every request accounted for."
[[ $fails -eq 0 ]]
