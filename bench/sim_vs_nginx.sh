#!/usr/bin/env bash
# sim_vs_nginx.sh [BUILD_DIR] [SECONDS] [ROUNDS]: non-streaming tiny responses, `llmtap sim`
# against nginx `return 200` of the same body, both measured with wrk in the same run.
#
# Both servers get one worker thread (sim --threads 1, nginx worker_processes 1) pinned to CPU 0
# and the same keep-alive connections; wrk uses one thread pinned to CPU 1. Rounds alternate nginx and sim
# so that background load hits both alike. Besides requests/s, the server's own CPU time per
# request (utime + stime from /proc) is reported: on a shared machine it varies far less than
# throughput does. The script prints every round, the medians and the ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
secs=${2:-10}
rounds=${3:-3}
conns=${CONNS:-64}
command -v wrk >/dev/null && command -v nginx >/dev/null || { echo "needs wrk and nginx (scripts/setup.sh)" >&2; exit 1; }
[[ -x "$build/llmtap" ]] || { echo "no $build/llmtap; run scripts/build.sh $build" >&2; exit 1; }

work=$(mktemp -d)
sim_pid="" nginx_pid=""
cleanup() {
  [[ -n "$sim_pid" ]] && kill "$sim_pid" 2>/dev/null && wait "$sim_pid" 2>/dev/null
  [[ -n "$nginx_pid" ]] && kill "$nginx_pid" 2>/dev/null && wait "$nginx_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# The sim with no modelled delay, so that it answers at once.
taskset -c 0 "$build/llmtap" sim --listen 127.0.0.1:0 --served-model-name m --threads 1 --ttft-ms 0 --prefill-us-per-token 0 \
  --itl-ms 0 --itl-jitter-ms 0 >"$work/sim.out" 2>&1 &
sim_pid=$!
for _ in $(seq 100); do grep -q listening "$work/sim.out" && break; sleep 0.05; done
sim_port=$(sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/sim.out")

body='{"model":"m","messages":[{"role":"user","content":"Hi"}],"max_tokens":1}'
# The response body nginx will return: one the sim produced for this very request.
resp=$(curl -s "http://127.0.0.1:$sim_port/v1/chat/completions" -H 'content-type: application/json' -d "$body")
echo "request:  $body"
echo "response: $resp (${#resp} bytes)"

nginx_port=$((20000 + RANDOM % 20000))
mkdir -p "$work/nginx/logs"
esc=${resp//\\/\\\\}
esc=${esc//\'/\\\'}
cat >"$work/nginx/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $work/nginx/nginx.pid;
error_log $work/nginx/logs/error.log error;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 100000000;
  keepalive_timeout 60s;
  client_body_temp_path $work/nginx/body;
  server {
    listen 127.0.0.1:$nginx_port;
    location / {
      default_type application/json;
      return 200 '$esc';
    }
  }
}
CONF
taskset -c 0 nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" -e "$work/nginx/logs/error.log" &
nginx_pid=$!
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$nginx_port/" && break; sleep 0.05; done
nginx_resp=$(curl -s "http://127.0.0.1:$nginx_port/v1/chat/completions" -d "$body")
[[ ${#nginx_resp} == "${#resp}" ]] || { echo "nginx body differs in size" >&2; exit 1; }

cat >"$work/post.lua" <<LUA
wrk.method = "POST"
wrk.body = '$body'
wrk.headers["Content-Type"] = "application/json"
LUA

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }  # utime + stime
tick_us=$((1000000 / $(getconf CLK_TCK)))
run() {  # run URL PID -> "requests/s server-CPU-microseconds-per-request"
  local before after out
  before=$(cpu_ticks "$2")
  out=$(taskset -c 1 wrk -t1 -c"$conns" -d"${secs}s" -s "$work/post.lua" "$1")
  after=$(cpu_ticks "$2")
  awk -v t=$((after - before)) -v us="$tick_us" '
    /requests in/ {n = $1} /Requests\/sec/ {r = $2}
    END {printf "%s %.2f", r, t * us / n}' <<<"$out"
}
echo "taskset -c 1 wrk -t1 -c$conns -d${secs}s, POST of the request above; $rounds rounds"
worker=$(pgrep -P "$nginx_pid" | head -1)  # the nginx worker process
nginx_r=() sim_r=() ratio_r=() nginx_c=() sim_c=() cratio_r=()
for r in $(seq "$rounds"); do
  read -r n nc <<<"$(run "http://127.0.0.1:$nginx_port/v1/chat/completions" "$worker")"
  read -r s sc <<<"$(run "http://127.0.0.1:$sim_port/v1/chat/completions" "$sim_pid")"
  q=$(awk -v s="$s" -v n="$n" 'BEGIN {printf "%.2f", s/n}')
  cq=$(awk -v s="$sc" -v n="$nc" 'BEGIN {printf "%.2f", n/s}')
  echo "round $r: nginx $n req/s ($nc us CPU/req), sim $s req/s ($sc us CPU/req); sim/nginx: throughput $q, CPU efficiency $cq"
  nginx_r+=("$n") sim_r+=("$s") ratio_r+=("$q") nginx_c+=("$nc") sim_c+=("$sc") cratio_r+=("$cq")
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "median: nginx $(median "${nginx_r[@]}") req/s, $(median "${nginx_c[@]}") us CPU/req;" \
  "sim $(median "${sim_r[@]}") req/s, $(median "${sim_c[@]}") us CPU/req"
echo "median of per-round ratios sim/nginx: throughput $(median "${ratio_r[@]}")," \
  "CPU efficiency (nginx CPU per request / sim CPU per request) $(median "${cratio_r[@]}")"
