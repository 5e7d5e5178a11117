#!/usr/bin/env bash
# proxy_shadow.sh [BUILD_DIR] [ROUNDS] [REQUESTS] [CONCURRENCY]: what shadow traffic costs the
# primary (issue 36), in one run. Two `llmtap proxy` processes (one thread each, CPU $PROXY_CPU,
# default 0) in front of the same `llmtap sim` primary: one plain, one with `--shadow` to a
# second `llmtap sim` (the candidate) at --shadow-sample-rate 1 (every request mirrored).
# bench/proxy_api_load.mjs sends REQUESTS streamed chat requests (default 2000, 20 tokens, ~1 KB
# prompts) with CONCURRENCY in flight (default 32) to each proxy in turn, ROUNDS times (default 3;
# the sims and the client on CPU $LOAD_CPU, default 1). Prints per proxy the CPU microseconds per
# request (utime + stime from /proc) and the client's TTFT p50 / p99 (request sent -> first body
# bytes), the median of the rounds, then checks the shadowing proxy's counters (every request
# matched, sent and completed, none dropped) and its --shadow-pairs file (one line per request,
# outputs equal: both sims run with the same options). Three more proxies mirror to a stopped
# candidate (`down`: every mirror dropped, a refused connect, then not tried while backing off),
# to a sim 10x slower (`slow`: more mirrors in flight than --shadow-max-in-flight, the rest
# dropped) and to an nginx answering 500 to everything (`errors`): their rows show what a dead,
# slow or failing candidate costs the primary, and the script checks that each counted every
# matched request as sent or dropped. The sims answer with --ttft-ms $SIM_TTFT_MS (default 20)
# and --itl-ms $SIM_ITL_MS (default 2), as a server does, not at once: TTFT then is the
# server's plus what the path adds, not the queue of a saturated CPU.
# With nginx installed, two nginx workers in the same rounds:
# `nginx` (proxy_pass) and `nginx-mirror` (the same plus `mirror` to the candidate), the anchor
# for what mirroring costs a proxy that compares nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-3}
requests=${3:-2000}
concurrency=${4:-32}
max_tokens=${MAX_TOKENS:-20}
proxy_cpu=${PROXY_CPU:-0}
sim_ttft_ms=${SIM_TTFT_MS:-20}
sim_itl_ms=${SIM_ITL_MS:-2}
load_cpu=${LOAD_CPU:-1}
llmtap=$(realpath "$build/llmtap")

# shellcheck source=tests/lib/background.sh
. tests/lib/background.sh  # work, pids, wait_port, cpu_ticks

declare -A sim_port
start_sim() {  # start_sim NAME [SLOWER]: sim_port[NAME] (in this shell, so that its pid reaches `pids`)
  local x=${2:-1}
  taskset -c "$load_cpu" "$llmtap" sim --listen 127.0.0.1:0 --served-model-name m --threads 1 \
    --ttft-ms "$(awk -v a="$sim_ttft_ms" -v x="$x" 'BEGIN {print a * x}')" --prefill-us-per-token 0 \
    --itl-ms "$(awk -v a="$sim_itl_ms" -v x="$x" 'BEGIN {print a * x}')" --itl-jitter-ms 0 \
    >"$work/$1.out" 2>&1 &
  pids+=($!)
  sim_port[$1]=$(wait_port "$work/$1.out")
  [[ -n "${sim_port[$1]}" ]] || { cat "$work/$1.out" >&2; exit 1; }
}
start_sim primary
start_sim candidate
primary=${sim_port[primary]}
candidate=${sim_port[candidate]}
declare -A proxy_pid proxy_port
start_proxy() {  # start_proxy NAME [ARGS...]
  local name=$1
  shift
  taskset -c "$proxy_cpu" "$llmtap" proxy --listen 127.0.0.1:0 --threads 1 --no-capture \
    --upstream "http://127.0.0.1:$primary" "$@" >"$work/$name.out" 2>&1 &
  proxy_pid[$name]=$!
  pids+=($!)
  proxy_port[$name]=$(wait_port "$work/$name.out")
  [[ -n "${proxy_port[$name]}" ]] || { cat "$work/$name.out" >&2; exit 1; }
}
start_proxy off
start_proxy on --shadow "http://127.0.0.1:$candidate" --shadow-sample-rate 1 \
  --shadow-max-in-flight 1000 --shadow-pairs "$work/pairs.ndjson"
# The candidate stopped: nothing listens on the port of a sim started and stopped again.
start_sim stopped
kill "${pids[-1]}"
wait "${pids[-1]}" 2>/dev/null || true
start_proxy down --shadow "http://127.0.0.1:${sim_port[stopped]}" --shadow-sample-rate 1
start_sim slow 10
start_proxy slow --shadow "http://127.0.0.1:${sim_port[slow]}" --shadow-sample-rate 1

# nginx as the anchor (when installed): one worker (CPU $PROXY_CPU) with proxy_pass to the
# primary, and one more doing the same plus `mirror` of every request to the candidate (nginx
# mirrors and discards; it compares nothing). Their worker processes' CPU is measured.
declare -A ngx_worker
names=(off on down slow)
start_nginx() {  # start_nginx NAME MIRROR(0|1|fail)
  local dir="$work/$1" port=$((20000 + RANDOM % 12000)) mirror="" mirror_location="" root="proxy_pass http://primary;"
  mkdir -p "$dir/logs"
  if [[ "$2" == fail ]]; then  # a candidate answering 500 to everything
    root="return 500 '{\"error\":{\"message\":\"overloaded\",\"type\":\"server_error\"}}';"
  elif (($2)); then
    mirror="mirror /mirror; mirror_request_body on;"
    mirror_location="location = /mirror { internal; proxy_pass http://candidate\$request_uri;
      proxy_http_version 1.1; proxy_set_header Connection \"\"; }"
  fi
  cat >"$dir/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $dir/nginx.pid;
error_log $dir/logs/error.log error;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 100000000;
  client_body_temp_path $dir/body;
  proxy_temp_path $dir/proxy;
  client_body_buffer_size 64k;
  upstream primary { server 127.0.0.1:$primary; keepalive 64; }
  upstream candidate { server 127.0.0.1:$candidate; keepalive 64; }
  server {
    listen 127.0.0.1:$port;
    location / {
      $mirror
      $root
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
    $mirror_location
  }
}
CONF
  taskset -c "$proxy_cpu" nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/logs/error.log" &
  local npid=$!
  pids+=("$npid")
  local _
  for _ in $(seq 200); do curl -s -o /dev/null "http://127.0.0.1:$port/health" && break; sleep 0.05; done
  ngx_worker[$1]=$(pgrep -P "$npid" | head -1)
  [[ -n "${ngx_worker[$1]}" ]] || { cat "$dir/logs/error.log" >&2; exit 1; }
  proxy_pid[$1]=${ngx_worker[$1]}
  proxy_port[$1]=$port
  [[ "$2" == fail ]] || names+=("$1")
}
if command -v nginx >/dev/null; then
  start_nginx nginx 0
  start_nginx nginx-mirror 1
  start_nginx failing fail
  start_proxy errors --shadow "http://127.0.0.1:${proxy_port[failing]}" --shadow-sample-rate 1
  names=(off on down slow errors nginx nginx-mirror)
fi

hz=$(getconf CLK_TCK)
declare -A cpu p50 p99
echo "== $rounds rounds x $requests streamed chat requests per proxy, $concurrency in flight, max_tokens $max_tokens; sims --ttft-ms $sim_ttft_ms --itl-ms $sim_itl_ms (slow: 10x); proxies on CPU $proxy_cpu, sims and client on CPU $load_cpu"
for name in "${names[@]}"; do  # warm-up
  node bench/proxy_api_load.mjs "127.0.0.1:${proxy_port[$name]}" chat 200 "$concurrency" "$max_tokens"
done
for ((r = 1; r <= rounds; ++r)); do
  for name in "${names[@]}"; do
    before=$(cpu_ticks "${proxy_pid[$name]}")
    t=$(taskset -c "$load_cpu" node bench/proxy_api_load.mjs "127.0.0.1:${proxy_port[$name]}" chat \
      "$requests" "$concurrency" "$max_tokens" ttft)
    after=$(cpu_ticks "${proxy_pid[$name]}")
    cpu[$name]+="$(awk -v t=$((after - before)) -v hz="$hz" -v n="$requests" \
      'BEGIN {printf "%.1f", t / hz / n * 1e6}') "
    p50[$name]+="$(node -e "console.log(JSON.parse(process.argv[1]).p50)" "$t") "
    p99[$name]+="$(node -e "console.log(JSON.parse(process.argv[1]).p99)" "$t") "
  done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
printf '%-14s %12s %14s %14s   %s\n' proxy "us/request" "TTFT p50 ms" "TTFT p99 ms" "rounds (us/request; p50; p99)"
for name in "${names[@]}"; do
  printf '%-14s %12s %14s %14s   %s; %s; %s\n' "$name" "$(median <<<"${cpu[$name]}")" \
    "$(median <<<"${p50[$name]}")" "$(median <<<"${p99[$name]}")" "${cpu[$name]}" "${p50[$name]}" "${p99[$name]}"
done
compare() {  # compare NAME BASE
  awk -v n="$1" -v m="$2" -v a="$(median <<<"${cpu[$1]}")" -v b="$(median <<<"${cpu[$2]}")" \
    -v c="$(median <<<"${p50[$1]}")" -v d="$(median <<<"${p50[$2]}")" \
    -v e="$(median <<<"${p99[$1]}")" -v f="$(median <<<"${p99[$2]}")" \
    'BEGIN {printf "%s minus %s: %+.1f us/request (%.2fx), TTFT p50 %+.3f ms, p99 %+.3f ms\n", n, m, a - b, a / b, c - d, e - f}'
}
compare on off
compare down off
compare slow off
[[ -n "${proxy_port[errors]:-}" ]] && compare errors off
[[ -n "${ngx_worker[nginx]:-}" ]] && compare nginx-mirror nginx

for _ in $(seq 200); do  # the last mirrors may still be reading the candidate's answer
  metrics=$(curl -sS "http://127.0.0.1:${proxy_port[on]}/llmtap/metrics")
  grep -q '^llmtap_shadow_in_flight 0$' <<<"$metrics" && break
  sleep 0.05
done
total=$(((rounds * requests) + 200))
for m in matched sent completed; do
  v=$(sed -n "s/^llmtap_shadow_${m}_total \([0-9]*\)$/\1/p" <<<"$metrics")
  [[ "$v" == "$total" ]] || { echo "llmtap_shadow_${m}_total is $v, expected $total" >&2; exit 1; }
done
dropped=$(grep '^llmtap_shadow_dropped_total' <<<"$metrics" | awk '{s += $2} END {print s}')
[[ "$dropped" == 0 ]] || { echo "mirrors dropped: $dropped" >&2; exit 1; }
kill "${proxy_pid[on]}"
wait "${proxy_pid[on]}" || true
pairs=$(wc -l <"$work/pairs.ndjson")
[[ "$pairs" == "$total" ]] || { echo "pairs written: $pairs, expected $total" >&2; exit 1; }
unequal=$(grep -vc '"output":{"equal":true' "$work/pairs.ndjson" || true)
[[ "$unequal" == 0 ]] || { echo "pairs with unequal outputs (same sim options): $unequal" >&2; exit 1; }
down=$(curl -sS "http://127.0.0.1:${proxy_port[down]}/llmtap/metrics")
refused=$(sed -n 's/^llmtap_shadow_dropped_total{reason="connect"} \([0-9]*\)$/\1/p' <<<"$down")
backed_off=$(sed -n 's/^llmtap_shadow_dropped_total{reason="candidate_down"} \([0-9]*\)$/\1/p' <<<"$down")
[[ "$((refused + backed_off))" == "$total" ]] ||
  { echo "stopped candidate: $refused + $backed_off dropped, expected $total" >&2; exit 1; }
# A slow or failing candidate: every matched request sent or dropped (and counted by reason).
accounted() {  # accounted NAME: "sent S + dropped D (reasons) = matched M", or exits
  local m
  for _ in $(seq 400); do
    m=$(curl -sS "http://127.0.0.1:${proxy_port[$1]}/llmtap/metrics")
    grep -q '^llmtap_shadow_in_flight 0$' <<<"$m" && break
    sleep 0.05
  done
  local matched sent dropped reasons
  matched=$(sed -n 's/^llmtap_shadow_matched_total \([0-9]*\)$/\1/p' <<<"$m")
  sent=$(sed -n 's/^llmtap_shadow_sent_total \([0-9]*\)$/\1/p' <<<"$m")
  dropped=$(grep '^llmtap_shadow_dropped_total' <<<"$m" | awk '{s += $2} END {print s}')
  reasons=$(grep '^llmtap_shadow_dropped_total' <<<"$m" | awk '$2 > 0 {sub(/.*reason="/, "", $1); sub(/"}/, "", $1); printf "%s%s %s", sep, $1, $2; sep = ", "}')
  [[ "$matched" == "$total" && "$((sent + dropped))" == "$matched" ]] ||
    { echo "$1: sent $sent + dropped $dropped != matched $matched (expected $total)" >&2; exit 1; }
  echo "$1: sent $sent + dropped $dropped (${reasons:-none}) = matched $matched"
}
echo "shadow checked: $total matched, sent and completed, 0 dropped; $pairs pair lines, outputs all equal; stopped candidate: $total dropped ($refused refused connections, $backed_off while backing off)"
accounted slow
[[ -n "${proxy_port[errors]:-}" ]] && accounted errors
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
