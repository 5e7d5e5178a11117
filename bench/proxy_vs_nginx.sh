#!/usr/bin/env bash
# proxy_vs_nginx.sh [BUILD_DIR] [SECONDS] [ROUNDS]: `llmtap proxy` against nginx as a reverse
# proxy in front of the same fast upstream, all measured with wrk in the same run.
#
# Upstream: `llmtap sim --threads 1` with no modelled delay (--ttft-ms 0 --prefill-us-per-token 0
# --itl-ms 0 --itl-jitter-ms 0 --spec-tokens 0), on its own port. Request: a 1 KB chat body
# (POST /v1/chat/completions, max_tokens 8). Targets:
#   direct      the sim itself
#   nginx       proxy_pass, keep-alive upstream pool, proxy_http_version 1.1, proxy_buffering off
#   nginx-log   the same plus access_log of $request_body (escape=none, buffer=256k flush=1s;
#               client_body_buffer_size 64k keeps the body in memory)
#   llmtap-off  llmtap proxy --threads 1 --no-capture
#   llmtap-on   llmtap proxy --threads 1 --capture --capture-path <temp dir>/requests.jsonl
# Both proxies get one worker (nginx worker_processes 1, llmtap --threads 1) pinned to CPU
# $PROXY_CPU (0); the sim and wrk (-t1) share CPU $LOAD_CPU (1). wrk -t1 -c1 and -c32, --latency,
# SECONDS per run; rounds alternate the order of targets so background load hits all alike.
# Each run also reports the CPU time (utime + stime from /proc) the measured server process
# spends per request: on a shared machine it moves far less than throughput does.
#
# Then the same for streaming: "stream":true, max_tokens 20 (22 SSE events: role, 20 tokens,
# [DONE]). Last, bench/proxy_sse_latency.py measures the TTFT and per-chunk latency each proxy
# adds, against a sim with a fixed 2 ms decode step (SSE_REQUESTS streams per target and round;
# SSE_PROXY_CPU moves the proxies for that part; SSE_ONLY=1 runs only that part), and prints
# the CPU time each proxy process spent on it. Its client runs on the proxies' CPU
# (SSE_CLIENT_CPU, default SSE_PROXY_CPU) and the sim on the other one, so that the direct path
# and the proxied path each cross between the two vCPUs once: the sim's send wakes the client
# (direct) or the proxy (proxied) on the other vCPU, and the proxy's send wakes the client on
# its own. With the client beside the sim instead (SSE_CLIENT_CPU=1), the direct reference never
# leaves one vCPU and every proxy pays a second idle-vCPU wake-up, which on a VM costs 0.1 ms or
# more: a cost of the machine's topology, not of the proxy.
#
# Prints every run, then per mode and concurrency the medians and the medians of per-round ratios.
# TLS=both (issue 18): TLS in and TLS out. Every target speaks https to wrk (certificates of
# tests/lib/make_test_certs.sh, EC P-256), and the proxies reach the sim through an nginx
# terminating TLS in front of it (one worker, on CPU $LOAD_CPU with the sim and wrk), over pooled
# keep-alive TLS connections that verify the terminator's certificate: llmtap with --tls-cert
# --tls-key --upstream https://localhost:T --cacert, nginx with listen ssl and proxy_pass https
# (proxy_ssl_session_reuse on, proxy_ssl_verify on). `direct` is then the terminator. The SSE
# latency part is plain HTTP only, so TLS=both skips it.
#
# MODES (default "plain stream") picks the wrk modes; SKIP_SSE=1 leaves out the SSE latency
# part; LLMTAP_ON_ARGS adds arguments to llmtap-on (bench/upload_overhead.sh uses it for
# --upload-url and --compress zstd).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
secs=${2:-5}
rounds=${3:-5}
proxy_cpu=${PROXY_CPU:-0}
load_cpu=${LOAD_CPU:-1}
sse_requests=${SSE_REQUESTS:-200}
sse_proxy_cpu=${SSE_PROXY_CPU:-$proxy_cpu}  # where the proxies run for the SSE latency part
sse_client_cpu=${SSE_CLIENT_CPU:-$sse_proxy_cpu}  # where its client runs
sse_only=${SSE_ONLY:-0}  # 1: only the SSE latency part
sse_rounds=${SSE_ROUNDS:-$rounds}
concs=${CONCS:-"1 32"}
wrk_modes=${MODES:-"plain stream"}
skip_sse=${SKIP_SSE:-0}
read -r -a on_args <<<"${LLMTAP_ON_ARGS:-}"
tls=${TLS:-off}
[[ $tls == off || $tls == both ]] || { echo "TLS must be off or both" >&2; exit 2; }
[[ $tls == both ]] && skip_sse=1
command -v wrk >/dev/null && command -v nginx >/dev/null || { echo "needs wrk and nginx (scripts/setup.sh)" >&2; exit 1; }
[[ -x "$build/llmtap" ]] || { echo "no $build/llmtap; run scripts/build.sh $build" >&2; exit 1; }
llmtap=$(realpath "$build/llmtap")

# shellcheck source=tests/lib/background.sh
. tests/lib/background.sh

# What the targets and the proxies' upstream speak; with TLS, the certificates and the flags.
scheme=http up_scheme=http up_host=127.0.0.1 curl_tls=() lt_tls=() ngx_listen_tls="" ngx_up_tls=""
if [[ $tls == both ]]; then
  bash tests/lib/make_test_certs.sh "$work/certs"
  scheme=https up_scheme=https up_host=localhost
  curl_tls=(--cacert "$work/certs/ca.pem")
  lt_tls=(--tls-cert "$work/certs/server.pem" --tls-key "$work/certs/server.key"
          --cacert "$work/certs/ca.pem")
  ngx_listen_tls=" ssl;
    ssl_certificate $work/certs/server.pem;
    ssl_certificate_key $work/certs/server.key"
  ngx_up_tls="proxy_ssl_session_reuse on;
      proxy_ssl_server_name on;
      proxy_ssl_name localhost;
      proxy_ssl_verify on;
      proxy_ssl_trusted_certificate $work/certs/ca.pem;"
fi

wait_listening() {  # wait_listening FILE -> prints the port from "listening on http[s]://127.0.0.1:PORT"
  local _
  for _ in $(seq 200); do grep -q 'listening on' "$1" 2>/dev/null && break; sleep 0.05; done
  sed -n 's/.*listening on https\{0,1\}:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$1" | head -1
}

# --- request bodies: ~1 KB chat, one line ---------------------------------------------------
make_body() {  # make_body STREAM(true|false) MAX_TOKENS
  python3 - "$1" "$2" <<'PY'
import json, sys
stream, max_tokens = sys.argv[1] == "true", int(sys.argv[2])
words = ("the capture proxy forwards every request to the upstream inference server and records "
         "matching request bodies for replay ").split()
def body(n):
    text = " ".join(words[i % len(words)] for i in range(n))
    d = {"model": "m", "messages": [{"role": "system", "content": "You are a helpful assistant."},
                                    {"role": "user", "content": text}],
         "max_tokens": max_tokens, "temperature": 0.7, "stream": stream}
    return json.dumps(d, separators=(",", ":"))
n = 1
while len(body(n + 1)) <= 1024:
    n += 1
sys.stdout.write(body(n))
PY
}
body_plain=$(make_body false 8)
body_stream=$(make_body true 20)
printf '%s' "$body_plain" >"$work/body_plain.json"
printf '%s' "$body_stream" >"$work/body_stream.json"
for m in plain stream; do
  b="body_$m"
  cat >"$work/post_$m.lua" <<LUA
wrk.method = "POST"
wrk.body = '${!b}'
wrk.headers["Content-Type"] = "application/json"
LUA
done

# --- start the upstream and the targets ----------------------------------------------------
start_sim() {  # start_sim NAME ITL_MS -> sets sim_port, sim_pid
  taskset -c "$load_cpu" "$llmtap" sim --listen 127.0.0.1:0 --served-model-name m --threads 1 --ttft-ms 0 \
    --prefill-us-per-token 0 --itl-ms "$2" --itl-jitter-ms 0 --spec-tokens 0 >"$work/$1.out" 2>&1 &
  sim_pid=$!
  pids+=("$sim_pid")
  sim_port=$(wait_listening "$work/$1.out")
  [[ -n "$sim_port" ]] || { cat "$work/$1.out" >&2; exit 1; }
}

start_llmtap() {  # start_llmtap NAME UPSTREAM_PORT ARGS... -> sets lt_port, lt_pid
  local name=$1 up=$2
  shift 2
  taskset -c "$proxy_cpu" "$llmtap" proxy --listen 127.0.0.1:0 --threads 1 \
    --upstream "$up_scheme://$up_host:$up" "${lt_tls[@]}" "$@" >"$work/$name.out" 2>&1 &
  lt_pid=$!
  pids+=("$lt_pid")
  lt_port=$(wait_listening "$work/$name.out")
  [[ -n "$lt_port" ]] || { cat "$work/$name.out" >&2; exit 1; }
}

start_nginx() {  # start_nginx NAME UPSTREAM_PORT -> sets ngx_port, ngxlog_port, ngx_worker
  local dir="$work/$1"
  mkdir -p "$dir/logs"
  ngx_port=$((20000 + RANDOM % 12000))  # below 32768, where the kernel picks ephemeral ports
  ngxlog_port=$((ngx_port + 1))
  cat >"$dir/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $dir/nginx.pid;
error_log $dir/logs/error.log error;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 100000000;
  keepalive_timeout 60s;
  client_body_temp_path $dir/body;
  proxy_temp_path $dir/proxy;
  client_body_buffer_size 64k;
  client_max_body_size 64m;
  log_format body escape=none '\$request_body';
  upstream sim {
    server 127.0.0.1:$2;
    keepalive 64;
    keepalive_requests 100000000;
  }
  server {
    listen 127.0.0.1:$ngx_port$ngx_listen_tls;
    location / {
      proxy_pass $up_scheme://sim;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      $ngx_up_tls
    }
  }
  server {
    listen 127.0.0.1:$ngxlog_port$ngx_listen_tls;
    access_log $dir/logs/bodies.log body buffer=256k flush=1s;
    location / {
      proxy_pass $up_scheme://sim;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      $ngx_up_tls
    }
  }
}
CONF
  taskset -c "$proxy_cpu" nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/logs/error.log" &
  local npid=$!
  pids+=("$npid")
  local _
  for _ in $(seq 200); do
    curl -s "${curl_tls[@]}" -o /dev/null "$scheme://127.0.0.1:$ngx_port/health" &&
      curl -s "${curl_tls[@]}" -o /dev/null "$scheme://127.0.0.1:$ngxlog_port/health" && break
    sleep 0.05
  done
  ngx_worker=$(pgrep -P "$npid" | head -1)
  [[ -n "$ngx_worker" ]] || { cat "$dir/logs/error.log" >&2; exit 1; }
}

# Checks that every target answers the request with the same status and the same shape.
check_targets() {  # check_targets BODY_FILE PORT...
  local f=$1 p out
  shift
  for p in "$@"; do
    out=$(curl -s "${curl_tls[@]}" -o "$work/check.out" -w '%{http_code}' "$scheme://127.0.0.1:$p/v1/chat/completions" \
      -H 'content-type: application/json' --data-binary "@$f")
    [[ $out == 200 ]] || { echo "port $p answered $out" >&2; exit 1; }
  done
}

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }  # utime + stime
# thread_ticks PID: "NAME TICKS" per live thread, summed by name (llmtap names its threads:
# llmtap-proxy, llmtap-capture, llmtap-upload, llmtap-sha256).
thread_ticks() {
  local t
  for t in /proc/"$1"/task/*; do
    # comm may hold spaces: the fields after ") " are counted from there.
    sed -n 's/^[0-9]* (\(.*\)) \(.*\)$/\1 \2/p' "$t/stat" 2>/dev/null | tr ' ' '\n' |
      awk 'NR == 1 {name = $0} NR == 13 {u = $0} NR == 14 {print name, u + $0}'
  done | awk '{s[$1] += $2} END {for (n in s) print n, s[n]}'
}
tick_us=$((1000000 / $(getconf CLK_TCK)))
results="$work/results.txt"
: >"$results"

# run MODE CONC ROUND TARGET PORT PID: one wrk run; appends
# "MODE CONC ROUND TARGET req/s p50_us p99_us cpu_us_per_req" to $results.
run() {
  local mode=$1 conc=$2 round=$3 target=$4 port=$5 pid=$6 before after out line threads_before
  before=$(cpu_ticks "$pid")
  threads_before=$(thread_ticks "$pid")
  out=$(taskset -c "$load_cpu" wrk -t1 -c"$conc" -d"${secs}s" --latency -s "$work/post_$mode.lua" \
    "$scheme://127.0.0.1:$port/v1/chat/completions")
  after=$(cpu_ticks "$pid")
  if grep -qE 'Non-2xx|Socket errors' <<<"$out"; then
    echo "$target ($mode, c=$conc): errors" >&2
    echo "$out" >&2
    exit 1
  fi
  line=$(awk -v t=$((after - before)) -v us="$tick_us" -v pre="$mode $conc $round $target" '
    function to_us(v) {
      if (v ~ /us$/) return v + 0; if (v ~ /ms$/) return v * 1000; if (v ~ /s$/) return v * 1e6
      return v
    }
    /requests in/ {n = $1} /Requests\/sec/ {r = $2}
    $1 == "50%" {p50 = to_us($2)} $1 == "99%" {p99 = to_us($2)}
    END {printf "%s %s %.1f %.1f %.2f", pre, r, p50, p99, t * us / n}' <<<"$out")
  echo "$line" >>"$results"
  echo "  $line"
  if [[ $target == llmtap* ]]; then
    # Where llmtap's CPU went, per request: live threads by name, and "exited" for threads that
    # ended during the run (an upload's part and hash threads).
    local n
    n=$(awk '/requests in/ {print $1}' <<<"$out")
    { echo "$threads_before" | sed 's/^/B /'; thread_ticks "$pid" | sed 's/^/A /'; } |
      awk -v total=$((after - before)) -v us="$tick_us" -v n="$n" '
        $1 == "B" {b[$2] = $3} $1 == "A" {a[$2] = $3}
        END {
          line = "    cpu us/req by thread:"; live = 0
          for (k in a) {d = a[k] - b[k]; live += d; line = line sprintf(" %s %.2f", k, d * us / n)}
          printf "%s exited %.2f\n", line, (total - live) * us / n
        }'
  fi
}

echo "host: $(nproc) CPUs; $(nginx -v 2>&1); $(wrk -v 2>&1 | head -1)"
# Other work on the machine moves req/s and p99 a lot: record how busy it was.
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "proxies on CPU $proxy_cpu; sim and wrk on CPU $load_cpu"
[[ $tls == both ]] && echo "TLS in and out: wrk -> proxy over https, proxy -> nginx TLS terminator (CPU $load_cpu) -> sim"
echo "request bodies: ${#body_plain} bytes (max_tokens 8), ${#body_stream} bytes (stream, max_tokens 20)"

# --- throughput and latency with wrk -------------------------------------------------------
start_sim sim0 0
if [[ $tls == both ]]; then
  # The TLS terminator in front of the sim: the proxies' upstream, and the `direct` target.
  direct_pid=$sim_pid
  saved_cpu=$proxy_cpu up_saved=$up_scheme
  proxy_cpu=$load_cpu up_scheme=http
  ngx_listen_tls_up=$ngx_up_tls ngx_up_tls=""
  start_nginx term "$sim_port"
  proxy_cpu=$saved_cpu up_scheme=$up_saved ngx_up_tls=$ngx_listen_tls_up
  sim_port=$ngx_port direct_pid=$ngx_worker
fi
start_nginx nginx0 "$sim_port"
start_llmtap lt_off "$sim_port" --no-capture
off_port=$lt_port off_pid=$lt_pid
mkdir -p "$work/capture"
start_llmtap lt_on "$sim_port" --capture --capture-path "$work/capture/requests.jsonl" "${on_args[@]}"
on_port=$lt_port on_pid=$lt_pid

names=(direct nginx nginx-log llmtap-off llmtap-on)
ports=("$sim_port" "$ngx_port" "$ngxlog_port" "$off_port" "$on_port")
procs=("${direct_pid:-$sim_pid}" "$ngx_worker" "$ngx_worker" "$off_pid" "$on_pid")
check_targets "$work/body_plain.json" "${ports[@]}"
check_targets "$work/body_stream.json" "${ports[@]}"
n_sse=$(curl -s "${curl_tls[@]}" "$scheme://127.0.0.1:$on_port/v1/chat/completions" --data-binary "@$work/body_stream.json" \
  -H 'content-type: application/json' | grep -c '^data: ')
echo "streaming response: $n_sse SSE events"

modes=$wrk_modes
[[ $sse_only == 1 ]] && modes=""
for mode in $modes; do
  for i in 0 1 2 3 4; do  # warm-up, not recorded
    taskset -c "$load_cpu" wrk -t1 -c32 -d1s -s "$work/post_$mode.lua" "$scheme://127.0.0.1:${ports[$i]}/v1/chat/completions" >/dev/null
  done
  for conc in $concs; do
    echo "== $mode, wrk -t1 -c$conc -d${secs}s --latency; $rounds rounds"
    for r in $(seq "$rounds"); do
      idx=(0 1 2 3 4)
      ((r % 2 == 0)) && idx=(4 3 2 1 0)
      for i in "${idx[@]}"; do
        run "$mode" "$conc" "$r" "${names[$i]}" "${ports[$i]}" "${procs[$i]}"
      done
    done
  done
done

# Capture accounting: every request llmtap-on answered was recorded.
sleep 1.5
if [[ $sse_only != 1 ]]; then
on_reqs=$(curl -s "${curl_tls[@]}" "$scheme://127.0.0.1:$on_port/llmtap/metrics" | tee "$work/on_metrics.txt" | grep -v '^#' | grep -iE 'record|drop' | tr '\n' ' ' || true)
lines=$(cat "$work"/capture/requests*.jsonl 2>/dev/null | wc -l)
bodies=$(wc -l <"$work/nginx0/logs/bodies.log" 2>/dev/null || echo 0)
echo "capture files on disk: $lines lines; nginx body log: $bodies lines"
echo "llmtap-on capture metrics: $on_reqs"
fi

# --- added SSE latency with a fixed decode step --------------------------------------------
if [[ $skip_sse != 1 ]]; then
for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
pids=()
proxy_cpu=$sse_proxy_cpu
start_sim sim2 2
start_nginx nginx2 "$sim_port"
start_llmtap lt_off2 "$sim_port" --no-capture
off_port=$lt_port
off_pid=$lt_pid
mkdir -p "$work/capture2"
start_llmtap lt_on2 "$sim_port" --capture --capture-path "$work/capture2/requests.jsonl"
on_port=$lt_port on_pid=$lt_pid
sse_names=(nginx llmtap-off llmtap-on)  # nginx: both servers share its worker
sse_procs=("$ngx_worker" "$off_pid" "$on_pid")
sse_before=()
for p in "${sse_procs[@]}"; do sse_before+=("$(cpu_ticks "$p")"); done
echo "== SSE added latency: proxies on CPU $proxy_cpu, sim on CPU $load_cpu, client on CPU $sse_client_cpu; sim --itl-ms 2 --itl-jitter-ms 0, $sse_requests streams per target and round, $sse_rounds rounds"
taskset -c "$sse_client_cpu" python3 bench/proxy_sse_latency.py --body "$work/body_stream.json" \
  --requests "$sse_requests" --rounds "$sse_rounds" \
  direct=127.0.0.1:"$sim_port" nginx=127.0.0.1:"$ngx_port" nginx-log=127.0.0.1:"$ngxlog_port" \
  llmtap-off=127.0.0.1:"$off_port" llmtap-on=127.0.0.1:"$on_port" | tee "$work/sse.txt"
# What each proxy process spent on the SSE part (every target got the same streams; the
# nginx worker served both nginx and nginx-log).
line="CPU seconds over the SSE part:"
for i in "${!sse_procs[@]}"; do
  line+=" ${sse_names[$i]} $(awk -v t=$(($(cpu_ticks "${sse_procs[$i]}") - sse_before[i])) -v us="$tick_us" 'BEGIN {printf "%.2f", t * us / 1e6}')"
done
echo "$line"
fi

# --- summary -------------------------------------------------------------------------------
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
[[ $sse_only == 1 ]] && exit 0
python3 - "$results" <<'PY'
import statistics, sys
from collections import defaultdict
rows = defaultdict(dict)   # (mode, conc) -> {(round, target): (rps, p50, p99, cpu)}
for ln in open(sys.argv[1]):
    mode, conc, rnd, target, rps, p50, p99, cpu = ln.split()
    rows[(mode, int(conc))][(int(rnd), target)] = (float(rps), float(p50), float(p99), float(cpu))
names = ["direct", "nginx", "nginx-log", "llmtap-off", "llmtap-on"]
med = statistics.median
for (mode, conc), d in rows.items():
    rounds = sorted({r for r, _ in d})
    def ratio(a, b, k=0):  # median over rounds of a/b
        return med(d[(r, a)][k] / d[(r, b)][k] for r in rounds)
    def diff(a, b, k):
        return med(d[(r, a)][k] - d[(r, b)][k] for r in rounds)
    print(f"\n### {mode}, c={conc} (medians of {len(rounds)} rounds; ratios are medians of per-round ratios)\n")
    print("| target | req/s | p50 us | p99 us | server CPU us/req | req/s vs nginx-log | req/s vs nginx "
          "| CPU efficiency vs nginx-log | CPU efficiency vs nginx | added p50 vs direct |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for t in names:
        v = [d[(r, t)] for r in rounds]
        rps, p50, p99, cpu = (med(x[i] for x in v) for i in range(4))
        vs = "" if t == "direct" else f"{ratio(t, 'nginx-log'):.2f}x"
        vn = "" if t == "direct" else f"{ratio(t, 'nginx'):.2f}x"
        add = "" if t == "direct" else f"{diff(t, 'direct', 1):+.1f} us"
        # CPU efficiency: the peer's CPU per request / this target's (above 1: cheaper than the peer).
        cs = "" if t == "direct" else f"{ratio('nginx-log', t, 3):.2f}x"
        cn = "" if t == "direct" else f"{ratio('nginx', t, 3):.2f}x"
        print(f"| {t} | {rps:.0f} | {p50:.1f} | {p99:.1f} | {cpu:.2f} | {vs} | {vn} | {cs} | {cn} | {add} |")
    print(f"\ncapture on vs off: throughput {ratio('llmtap-on', 'llmtap-off'):.3f}x, "
          f"p50 {diff('llmtap-on', 'llmtap-off', 1):+.1f} us, "
          f"CPU/req {ratio('llmtap-on', 'llmtap-off', 3):.3f}x")
    print(f"SUMMARY {mode} c={conc} on/nginx-log {ratio('llmtap-on','nginx-log'):.3f} "
          f"on/nginx {ratio('llmtap-on','nginx'):.3f} on/off {ratio('llmtap-on','llmtap-off'):.3f} "
          f"cpu_eff nginx-log/on {ratio('nginx-log','llmtap-on',3):.3f} nginx/on {ratio('nginx','llmtap-on',3):.3f} "
          f"added_p50 llmtap-on {diff('llmtap-on','direct',1):.1f} llmtap-off {diff('llmtap-off','direct',1):.1f} "
          f"nginx {diff('nginx','direct',1):.1f} nginx-log {diff('nginx-log','direct',1):.1f}")
PY
