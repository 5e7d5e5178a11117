#!/usr/bin/env bash
# disk_latency.sh [LLMTAP_BINARY]: request latency through `llmtap proxy` under disk faults,
# against capture off measured in the same run, plus exact loss accounting and resumption.
#
# One `llmtap sim` upstream; for each case a fresh proxy in front of it, the same fixed-rate
# open-loop load (fixed_rate.mjs: RATE requests/s for CASE_SECONDS, non-streaming and
# streaming chat with a ~2 KB prompt alternating, latency = send to end of body, first 2 s not
# measured), then the fault is cleared and requests are sent until a new record is written
# ("capture resumes"), then SIGTERM. Cases, in order:
#   off        --no-capture (baseline; run first and again last)
#   on         capture to a normal directory
#   full       capture into a 64 MiB tmpfs with 128 KiB left, in the proxy's own mount
#              namespace (unshare -m); afterwards the filler is removed (the space must
#              also hold the records the writer kept while backing off, written then)
#   slow       every write of the capture writer delayed by SLOW_WRITE_US (default 1 s)
#              through the capture core's Env seam (llmtap_slow_disk, built next to llmtap
#              from tests/reliability/slow_disk_proxy.cc: the real proxy command over a
#              FaultEnv), with max_queue_bytes 256 KiB: the queue fills and records are
#              dropped, the request path must not wait. The delay ends 1 s after the load
#              (--slow-for-s), which is when the fault counts as cleared
#   unwritable a regular file where the capture directory should be; removed half-way
#   moved      the capture file renamed away every 2 s while capturing
# For every capture case it checks: requests sent = lines in all capture files + the drops the
# proxy counted (its final "capture stopped: R recorded, N not recorded" line, whose numbers
# the final manifest also holds: N = skipped + sampled_out + invalid + queue-full +
# write-failed), and that a record was written after the fault was cleared. The
# write_failed/dropped_queue_full columns come from the manifest; "*" marks a manifest that is
# not the final one (the full tmpfs could not take it at stop).
#
# Needs root (unshare -m, mount), node, curl. Knobs: RATE (200), CASE_SECONDS (20),
# SLOW_WRITE_US (1000000), CASES (the list above; names starting "off" or "on" may repeat,
# e.g. CASES="off1 on1 off2 on2"), KEEP=1 keeps the work dir, RESULTS_CSV=FILE copies the
# results. Output: a table on stdout and $dir/results.csv. Exit 0 when every accounting and
# resumption check holds (latency ratios are measured and printed, not asserted), 1 otherwise.
# On a shared machine: nice -n 10 tests/reliability/disk_latency.sh build/llmtap
set -euo pipefail

bin=$(realpath "${1:-build/llmtap}")
rate=${RATE:-200}
secs=${CASE_SECONDS:-20}
slow_us=${SLOW_WRITE_US:-1000000}
here=$(cd "$(dirname "$0")" && pwd)
slow_bin=$(dirname "$bin")/llmtap_slow_disk
for tool in node curl unshare; do
  command -v "$tool" >/dev/null || { echo "disk_latency.sh: $tool is missing" >&2; exit 2; }
done
dir=$(mktemp -d /tmp/llmtap-disklat.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [[ -n "${KEEP:-}" ]] || rm -rf "$dir"
}
trap cleanup EXIT

# shellcheck source=tests/reliability/port_of.sh
. "$here/port_of.sh"

"$bin" sim --listen 127.0.0.1:0 --served-model-name m --threads 2 --seed 3 --ttft-ms 2 --prefill-us-per-token 1 \
  --itl-ms 0.5 --itl-jitter-ms 0 >"$dir/sim.out" 2>"$dir/sim.out.err" &
sim_pid=$!
pids+=("$sim_pid")
upstream="http://127.0.0.1:$(port_of "$dir/sim.out" "$sim_pid" 400)"

metric() { curl -sf --max-time 5 "$1/llmtap/metrics" | awk -v k="$2" '$1 == k { print $2 }'; }
chat() {  # one small chat request; prints the status
  curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$1/v1/chat/completions" \
    -d '{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"resume check"}]}'
}
# counter MANIFEST KEY
counter() { grep -oE "\"$2\": *[0-9]+" "$1" | head -1 | grep -oE '[0-9]+$' || echo 0; }

echo "case,sent,ok,errors,p50_ms,p90_ms,p99_ms,max_ms,p50_ratio,p99_ratio,lines,recorded,not_recorded,write_failed,dropped_queue_full,queue_peak_bytes,accounted,resumed" >"$dir/results.csv"
declare -A P50 P99 JSON
failures=0

# run_case NAME: starts the proxy for NAME, loads it, clears the fault, checks, stops it.
run_case() {
  local name=$1 cdir="$dir/$1" base pid wrapper='' extra=0 resumed=n/a
  mkdir -p "$cdir/files"
  local common=(proxy --listen 127.0.0.1:0 --threads 2 --upstream "$upstream")
  local cap=(--capture --capture-path "$cdir/files/requests.jsonl")
  case $name in
    off*) "$bin" "${common[@]}" --no-capture >"$cdir/out" 2>"$cdir/out.err" & pid=$! ;;
    on* | moved) "$bin" "${common[@]}" "${cap[@]}" >"$cdir/out" 2>"$cdir/out.err" & pid=$! ;;
    unwritable)
      echo 'not a directory' >"$cdir/blocked"
      "$bin" "${common[@]}" --capture --capture-path "$cdir/blocked/requests.jsonl" \
        >"$cdir/out" 2>"$cdir/out.err" & pid=$! ;;
    slow)
      [[ -x "$slow_bin" ]] || { echo "disk_latency.sh: $slow_bin is missing (build the tests)" >&2; exit 2; }
      # The proxy's start-up and the load take a little over $secs s; the delay ends then.
      "$slow_bin" --write-delay-us "$slow_us" --slow-for-s $((secs + 1)) "${common[@]}" "${cap[@]}" \
        --max-request-bytes 65536 --max-queue-bytes 262144 >"$cdir/out" 2>"$cdir/out.err" &
      pid=$! ;;
    full)
      mkdir -p "$cdir/mnt"
      # The proxy's own mount namespace: a small tmpfs, mostly filled; when the proxy exits,
      # its files are copied out (the tmpfs goes with the namespace).
      unshare -m --propagation private sh -c '
        mount -t tmpfs -o size=64m tmpfs "$0" || exit 3
        head -c 66977792 /dev/zero >"$0/filler"
        "$1" proxy --listen 127.0.0.1:0 --threads 2 --upstream "$2" --capture \
          --capture-path "$0/requests.jsonl" >"$3/out" 2>"$3/out.err" &
        echo $! >"$3/pid"
        wait $!; rc=$?
        cp "$0"/requests* "$3/files/" 2>/dev/null
        exit $rc' "$cdir/mnt" "$bin" "$upstream" "$cdir" &
      wrapper=$!
      for _ in $(seq 100); do [[ -s "$cdir/pid" ]] && break; sleep 0.05; done
      pid=$(cat "$cdir/pid") ;;
  esac
  pids+=("$pid" ${wrapper:+"$wrapper"})
  base="http://127.0.0.1:$(port_of "$cdir/out" "$pid" 400)"

  # The fault's course during the load.
  local during=''
  case $name in
    unwritable) (sleep $((secs / 2)); rm -f "$cdir/blocked") & during=$! ;;
    moved) (for k in $(seq $((secs / 2))); do sleep 2; mv "$cdir/files/requests.jsonl" "$cdir/files/moved.$k.jsonl" 2>/dev/null || true; done) & during=$! ;;
  esac
  # The queue's peak during the load (the slow writer shows here), polled every 0.5 s.
  (while :; do
    metric "$base" llmtap_capture_queue_bytes >>"$cdir/queue_samples" || true
    sleep 0.5
  done) &
  local poller=$!
  JSON[$name]=$(node "$here/fixed_rate.mjs" --url "$base" --rate "$rate" --seconds "$secs")
  kill "$poller" 2>/dev/null || true
  wait "$poller" 2>/dev/null || true
  [[ -n "$during" ]] && wait "$during"
  local sent ok errors
  sent=$(node -e 'const r=JSON.parse(process.argv[1]);console.log(r.sent)' "${JSON[$name]}")
  ok=$(node -e 'const r=JSON.parse(process.argv[1]);console.log(r.ok)' "${JSON[$name]}")
  errors=$(node -e 'const r=JSON.parse(process.argv[1]);console.log(r.errors+r.non_200)' "${JSON[$name]}")
  P50[$name]=$(node -e 'console.log(JSON.parse(process.argv[1]).p50_ms)' "${JSON[$name]}")
  P99[$name]=$(node -e 'console.log(JSON.parse(process.argv[1]).p99_ms)' "${JSON[$name]}")

  if [[ $name != off* ]]; then
    # Clear the fault, then send until a record is written after it (the writer retries
    # with back-off, so this can take a few seconds).
    [[ $name == full ]] && rm -f "/proc/$pid/root$cdir/mnt/filler"
    local before after deadline=$((SECONDS + 30))
    before=$(metric "$base" llmtap_capture_recorded_total)
    resumed=no
    while ((SECONDS < deadline)); do
      [[ $(chat "$base") == 200 ]] || { echo "$name: a resume-check request failed" >&2; failures=$((failures + 1)); }
      extra=$((extra + 1))
      after=$(metric "$base" llmtap_capture_recorded_total)
      if ((after > before)); then resumed=yes; break; fi
      sleep 0.2
    done
  fi
  kill -TERM "$pid"
  if [[ -n "$wrapper" ]]; then wait "$wrapper" || true; else wait "$pid" || true; fi

  local lines=- recorded=- notrec=- wf=- dq=- accounted=n/a
  if [[ $name != off* ]]; then
    # The final counters: the proxy's last log line (the same numbers as the final manifest,
    # which a disk that is full again at stop cannot take; the manifest then stays the last
    # periodic one, "state": "running").
    local m stopped
    m=$(ls "$cdir"/files/requests.jsonl.manifest.json "$cdir"/blocked/requests.jsonl.manifest.json 2>/dev/null | head -1 || true)
    lines=$(cat "$cdir"/files/*.jsonl "$cdir"/blocked/*.jsonl 2>/dev/null | grep -c '' || true)
    stopped=$(grep -oE 'capture stopped: [0-9]+ recorded, [0-9]+ not recorded' "$cdir/out.err" | tail -1 || true)
    recorded=$(grep -oE '[0-9]+ recorded' <<<"$stopped" | grep -oE '[0-9]+' || echo -1)
    notrec=$(grep -oE '[0-9]+ not recorded' <<<"$stopped" | grep -oE '[0-9]+' || echo -1)
    wf=$(counter "$m" write_failed_records)
    dq=$(counter "$m" dropped_queue_full)
    grep -q '"state": "stopped"' "$m" || { wf="$wf*"; dq="$dq*"; }
    local total=$((sent + extra))
    if [[ $recorded -eq $lines && $((recorded + notrec)) -eq $total ]]; then
      accounted=yes
    else
      accounted="NO (sent $total)"
      failures=$((failures + 1))
    fi
    [[ $resumed == yes ]] || failures=$((failures + 1))
  fi
  [[ $errors -eq 0 ]] || failures=$((failures + 1))
  echo "$name,$sent,$ok,$errors,${P50[$name]},$(node -e 'const r=JSON.parse(process.argv[1]);console.log(r.p90_ms)' "${JSON[$name]}"),${P99[$name]},$(node -e 'const r=JSON.parse(process.argv[1]);console.log(r.max_ms)' "${JSON[$name]}"),RATIO50,RATIO99,$lines,$recorded,$notrec,$wf,$dq,$(sort -n "$cdir/queue_samples" | tail -1),$accounted,$resumed" >>"$dir/results.csv"
  echo "disk_latency: $name done: ${JSON[$name]} lines=$lines recorded=$recorded not_recorded=$notrec accounted=$accounted resumed=$resumed" >&2
}

cases=(${CASES:-off1 on full slow unwritable moved off2})
for c in "${cases[@]}"; do run_case "$c"; done

# Ratios against capture off: the mean over the off runs (by default the first and the last).
offs50=() offs99=()
for c in "${cases[@]}"; do
  if [[ $c == off* ]]; then offs50+=("${P50[$c]}"); offs99+=("${P99[$c]}"); fi
done
mean() { node -e 'const v=process.argv.slice(1).map(Number);console.log((v.reduce((a,b)=>a+b,0)/v.length).toFixed(3))' "$@"; }
off50=$(mean "${offs50[@]}")
off99=$(mean "${offs99[@]}")
awk -F, -v o50="$off50" -v o99="$off99" 'BEGIN { OFS = "," }
  NR > 1 { $9 = sprintf("%.3f", $5 / o50); $10 = sprintf("%.3f", $7 / o99) } { print }' \
  "$dir/results.csv" >"$dir/results.tmp" && mv "$dir/results.tmp" "$dir/results.csv"
echo "disk_latency: $rate req/s for $secs s per case; ratios against capture off (mean of the off runs: p50 $off50 ms, p99 $off99 ms)"
column -s, -t <"$dir/results.csv"
[[ -n "${RESULTS_CSV:-}" ]] && cp "$dir/results.csv" "$RESULTS_CSV"
if ((failures > 0)); then
  echo "disk_latency: FAIL ($failures failed checks: accounting, resumption or request errors)"
  exit 1
fi
echo "disk_latency: PASS (every request answered 200, every record accounted for, capture resumed in every case)"
