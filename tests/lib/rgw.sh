#!/usr/bin/env bash
# rgw.sh: a throw-away, one-node Ceph RADOS Gateway (S3-compatible object store) on 127.0.0.1,
# for tests and benchmarks. Needs the Debian packages radosgw, ceph-mon, ceph-osd (Ceph 16), curl
# (>= 7.75 for --aws-sigv4) and python3 (a dependency of ceph-common).
#
#   rgw.sh start  DIR         start mon + OSD + radosgw with all their files in DIR (created if
#                             missing; earlier rgw.sh files in it are replaced), create the S3 user,
#                             wait until a signed ListBuckets answers 200, then print and write to
#                             DIR/env:
#                               RGW_ENDPOINT=http://127.0.0.1:PORT
#                               AWS_ACCESS_KEY_ID=...
#                               AWS_SECRET_ACCESS_KEY=...
#                               AWS_REGION=us-east-1
#                             Use with: eval "$(rgw.sh start DIR)"   or   set -a; . DIR/env; set +a
#   rgw.sh stop   DIR         stop radosgw, then the OSD, then the mon (SIGTERM, SIGKILL after a
#                             few seconds); idempotent; leaves DIR in place (rm -rf it yourself).
#   rgw.sh pause  DIR         stop radosgw only ("store down"); objects survive in the OSD.
#   rgw.sh resume DIR         start radosgw again on the same port and wait until it answers.
#   rgw.sh mb     DIR BUCKET  create a bucket (3-63 characters); succeeds if you already own it.
#
# Environment (all optional): RGW_ACCESS_KEY (default llmtapkey), RGW_SECRET_KEY (llmtapsecret),
# RGW_MEMSTORE_BYTES (in-memory OSD capacity, default 4 GiB; RAM is only used for what is stored),
# RGW_TIMEOUT (seconds allowed for start/resume, default 300: a loaded 2-core machine has taken
# over 60; every wait also ends at once when its daemon exits).
#
# Notes for clients: use path-style addressing (http://127.0.0.1:PORT/BUCKET/KEY; no rgw_dns_name
# is set). With curl --aws-sigv4 "aws:amz:us-east-1:s3", also send -H 'x-amz-content-sha256: ...'
# (the payload's sha256 or UNSIGNED-PAYLOAD), or RGW answers 403. PUT needs a Content-Length:
# chunked uploads (curl -T -) get 411. Ceph 16 leaves the ETag empty in CompleteMultipartUpload's
# answer (HEAD the object for it). The data lives in RAM only: it survives pause/resume but not
# stop. A full OSD (see RGW_MEMSTORE_BYTES; overwritten data is freed ~10 s later) makes writes
# hang for about 2 minutes, then fail with 408.
#
# Several instances can run at once in different DIRs: each picks its own free mon and radosgw
# ports (below 32768, so never in the kernel's ephemeral range); the OSD binds the first free
# ports in 6800-7300. Nothing is read from or written to /etc/ceph or /var/lib/ceph.
set -euo pipefail

# Never talk to a proxy about 127.0.0.1, whatever the caller's environment says.
export no_proxy='*' NO_PROXY='*'
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY CEPH_ARGS

access_key=${RGW_ACCESS_KEY:-llmtapkey}
secret_key=${RGW_SECRET_KEY:-llmtapsecret}
memstore_bytes=${RGW_MEMSTORE_BYTES:-$((4 << 30))}
timeout_s=${RGW_TIMEOUT:-300}
region=us-east-1  # RGW does not check the SigV4 scope's region; us-east-1 is what SDKs expect.

die() {  # die MESSAGE [LOG...]: message and the tail of each existing log to stderr, exit 1
  local msg=$1 log
  shift
  echo "rgw.sh: $msg" >&2
  for log in "$@"; do
    [[ -s $log ]] || continue
    echo "---- last lines of $log ----" >&2
    tail -n 25 "$log" >&2
  done
  exit 1
}

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# --- files in DIR --------------------------------------------------------------------------------

set_paths() {  # set_paths DIR
  [[ -n ${1:-} ]] || usage
  dir=$(realpath -m -- "$1")
  conf=$dir/ceph.conf
  run=$dir/run
  logs=$dir/log
}

running() {  # running PID: the process exists and is not a zombie
  # A daemon that outlived its starter is reparented to PID 1, which (in containers) may reap it
  # only seconds after it exits: until then kill -0 still succeeds on the zombie.
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [[ ${stat%% *} != Z ]]
}

pid_alive() {  # pid_alive NAME: the daemon whose pid is in run/NAME.pid is still running
  local pid
  pid=$(cat "$run/$1.pid" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] && running "$pid"
}

# --- ports ---------------------------------------------------------------------------------------

port_free() {  # port_free PORT: nothing listens on 127.0.0.1:PORT and we may bind it
  python3 - "$1" <<'EOF' 2>/dev/null
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
EOF
}

pick_port() {  # pick_port AVOID: print a random free port in 20000-32767, other than AVOID
  local i p
  for ((i = 0; i < 200; i++)); do
    p=$((20000 + (RANDOM * 32768 + RANDOM) % 12768))
    [[ $p != "${1:-}" ]] && port_free "$p" && { echo "$p"; return 0; }
  done
  die "no free port found in 20000-32767"
}

# --- ceph commands -------------------------------------------------------------------------------

ceph_cli() { timeout 30 ceph -c "$conf" --connect-timeout 20 "$@" </dev/null; }
rgw_admin() { timeout 300 radosgw-admin -c "$conf" "$@" </dev/null; }

write_conf() {  # write_conf MON_PORT RGW_PORT FSID
  cat >"$conf" <<EOF
# Written by tests/lib/rgw.sh: a throw-away one-node cluster, everything under $dir.
[global]
fsid = $3
mon host = v2:127.0.0.1:$1
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind msgr1 = false
ms bind ipv6 = false
# OSD ports: the first free ones here; well below the ephemeral range (32768+).
ms bind port min = 6800
ms bind port max = 7300

# No cephx: no keyrings to manage. msgr2's default "secure" mode needs cephx session keys, so
# without crc mode clients (radosgw, ceph CLI) loop on EACCES while connecting to the mon.
auth cluster required = none
auth service required = none
auth client required = none
ms mon client mode = crc
ms mon service mode = crc
ms mon cluster mode = crc
ms client mode = crc
ms service mode = crc
ms cluster mode = crc

# Every file in DIR (run dir holds admin sockets).
run dir = $run
log file = $logs/\$name.log
mon cluster log file = $logs/cluster.log
crash dir = $dir/crash
keyring = $dir/keyring
mon data = $dir/\$name
osd data = $dir/\$name
rgw data = $dir/\$name
log to stderr = false
err to stderr = false
client mount timeout = 20
rados mon op timeout = 30
rados osd op timeout = 60

# One OSD, one host: single replica, small pools, no mgr (hence no autoscaler).
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon warn on insecure global id reclaim allowed = false
mon data avail warn = 2
mon data avail crit = 1

# Default paxos timings make every map change (pool creation...) take ~1 s: start-up ~12 s.
paxos propose interval = 0.01
paxos min wait = 0.001

[osd]
osd objectstore = memstore
memstore device bytes = $memstore_bytes
# SIGTERM exits at once instead of writing the whole memstore to disk first.
osd fast shutdown = true

[client.rgw.gw]
# tcp_nodelay: without it every response with a body waits ~40 ms (Nagle and delayed ACK).
rgw frontends = beast endpoint=127.0.0.1:$2 tcp_nodelay=1
admin socket = $run/\$name.asok
# Overwritten and deleted objects' data are freed by rgw's garbage collector, by default 2 h
# later: a benchmark overwriting 256 MB objects would fill the in-memory OSD. Free within ~10 s.
rgw gc obj min wait = 5
rgw gc processor period = 5
rgw gc processor max time = 5
rgw enable ops log = false
rgw enable usage log = false
EOF
}

spawn() {  # spawn NAME COMMAND...: run a daemon in the foreground, in the background; pid file
  "${@:2}" -f </dev/null >>"$logs/$1.out" 2>&1 &
  echo $! >"$run/$1.pid"
}

deadline=0
check_time() {  # check_time WHAT LOG...: die once the start/resume deadline has passed
  ((SECONDS < deadline)) || die "timed out after ${timeout_s}s waiting for $1" "${@:2}"
}

s3_status() {  # s3_status CURL_ARGS...: HTTP status of a signed request to the endpoint
  curl -sS -o /dev/null -w '%{http_code}' --max-time 30 --noproxy '*' \
    --aws-sigv4 "aws:amz:$region:s3" --user "$access_key:$secret_key" \
    -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$@" 2>/dev/null || true
}

start_rgw() {  # start_rgw PORT: start radosgw, wait until a signed ListBuckets answers 200
  local port=$1 status
  port_free "$port" || die "port $port (radosgw) is taken by another process"
  spawn client.rgw.gw radosgw -c "$conf" -n client.rgw.gw
  while status=$(s3_status "http://127.0.0.1:$port/") && [[ $status != 200 ]]; do
    pid_alive client.rgw.gw ||
      die "radosgw exited during start-up" "$logs/client.rgw.gw.out" "$logs/client.rgw.gw.log"
    check_time "radosgw to answer ListBuckets (last HTTP status: $status)" \
      "$logs/client.rgw.gw.out" "$logs/client.rgw.gw.log"
    sleep 0.2
  done
}

stop_daemon() {  # stop_daemon NAME: SIGTERM, SIGKILL after 5 s, wait until it is gone
  local pid i
  pid=$(cat "$run/$1.pid" 2>/dev/null) || return 0
  if [[ $pid =~ ^[0-9]+$ ]] && running "$pid" &&
    # Do not signal an unrelated process that reused the pid.
    [[ $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) == *"$conf"* ]]; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
      running "$pid" || break
      sleep 0.1
    done
    if running "$pid"; then
      kill -KILL "$pid" 2>/dev/null || true
      for ((i = 0; i < 50; i++)); do
        running "$pid" || break
        sleep 0.1
      done
    fi
  fi
  rm -f "$run/$1.pid"
}

# --- commands ------------------------------------------------------------------------------------

stop_unless_started() { ((started)) || { set +e; cmd_stop; }; }

cmd_start() {
  local mon_port rgw_port fsid osd_uuid osd_id
  deadline=$((SECONDS + timeout_s))
  for name in mon.a osd.0 client.rgw.gw; do
    if [[ -d $run ]] && pid_alive "$name"; then
      die "$dir already has a running $name; run: $0 stop $dir"
    fi
  done
  [[ $memstore_bytes =~ ^[0-9]+$ ]] || die "RGW_MEMSTORE_BYTES must be a number of bytes"
  # A failed start leaves no daemons behind (the caller may not have set its cleanup trap yet).
  started=0
  trap stop_unless_started EXIT
  # Only our own files: a fresh cluster each time.
  rm -rf "$dir"/{mon.a,osd.0,client.rgw.gw,run,log,crash,monmap,ceph.conf,ports,env}
  mkdir -p "$dir" "$run" "$logs" "$dir/crash" "$dir/client.rgw.gw"

  mon_port=$(pick_port)
  rgw_port=$(pick_port "$mon_port")
  echo "$rgw_port" >"$dir/ports"
  fsid=$(cat /proc/sys/kernel/random/uuid)
  osd_uuid=$(cat /proc/sys/kernel/random/uuid)
  write_conf "$mon_port" "$rgw_port" "$fsid"

  # Monitor.
  monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$mon_port]" "$dir/monmap" \
    >"$logs/setup.log" 2>&1 || die "monmaptool failed" "$logs/setup.log"
  ceph-mon -c "$conf" -i a --mkfs --monmap "$dir/monmap" >>"$logs/setup.log" 2>&1 ||
    die "ceph-mon --mkfs failed" "$logs/setup.log" "$logs/mon.a.log"
  spawn mon.a ceph-mon -c "$conf" -i a
  until ceph_cli mon stat >/dev/null 2>>"$logs/setup.log"; do
    pid_alive mon.a || die "ceph-mon exited during start-up" "$logs/mon.a.out" "$logs/mon.a.log"
    check_time "the monitor" "$logs/setup.log" "$logs/mon.a.log"
    sleep 0.1
  done

  # OSD (in-memory object store).
  osd_id=$(ceph_cli osd new "$osd_uuid" 2>>"$logs/setup.log") ||
    die "ceph osd new failed" "$logs/setup.log"
  [[ $osd_id == 0 ]] || die "unexpected OSD id '$osd_id'" "$logs/setup.log"
  mkdir -p "$dir/osd.0"
  timeout 300 ceph-osd -c "$conf" -i 0 --mkfs --osd-uuid "$osd_uuid" </dev/null \
    >>"$logs/setup.log" 2>&1 || die "ceph-osd --mkfs failed" "$logs/setup.log" "$logs/osd.0.log"
  spawn osd.0 ceph-osd -c "$conf" -i 0
  until [[ $(ceph_cli osd stat -f json 2>>"$logs/setup.log") == *'"num_up_osds":1,'* ]]; do
    pid_alive osd.0 || die "ceph-osd exited during start-up" "$logs/osd.0.out" "$logs/osd.0.log"
    check_time "the OSD to be up" "$logs/osd.0.log" "$logs/mon.a.log"
    sleep 0.1
  done

  # S3 user (radosgw-admin also creates the default realm/zone and rgw's first pools), then
  # radosgw itself.
  rgw_admin user create --uid=llmtap --display-name=llmtap \
    --access-key="$access_key" --secret-key="$secret_key" >>"$logs/setup.log" 2>&1 ||
    die "radosgw-admin user create failed" "$logs/setup.log" "$logs/client.admin.log"
  start_rgw "$rgw_port"

  local env
  env=$(printf 'RGW_ENDPOINT=%q\nAWS_ACCESS_KEY_ID=%q\nAWS_SECRET_ACCESS_KEY=%q\nAWS_REGION=%q\n' \
    "http://127.0.0.1:$rgw_port" "$access_key" "$secret_key" "$region")
  echo "$env" >"$dir/env"
  started=1
  echo "$env"
}

cmd_stop() {
  [[ -d $run ]] || return 0
  # radosgw first: with the OSD gone it would hang on its in-flight requests.
  stop_daemon client.rgw.gw
  stop_daemon osd.0
  stop_daemon mon.a
}

cmd_pause() {
  [[ -f $conf ]] || die "no rgw.sh instance in $dir"
  stop_daemon client.rgw.gw
}

cmd_resume() {
  [[ -f $conf && -f $dir/ports ]] || die "no rgw.sh instance in $dir"
  if ! pid_alive osd.0 || ! pid_alive mon.a; then
    die "the cluster in $dir is not running; use start"
  fi
  pid_alive client.rgw.gw && return 0
  deadline=$((SECONDS + timeout_s))
  start_rgw "$(cat "$dir/ports")"
}

cmd_mb() {  # cmd_mb BUCKET
  local bucket=${1:-} status
  [[ $bucket =~ ^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$ ]] ||
    die "bad bucket name '$bucket' (3-63 characters: a-z 0-9 . -)"
  [[ -f $dir/env ]] || die "no running rgw.sh instance in $dir"
  status=$(s3_status -X PUT "http://127.0.0.1:$(cat "$dir/ports")/$bucket")
  [[ $status == 200 ]] || die "creating bucket $bucket: HTTP status $status"
}

case ${1:-} in
  start | stop | pause | resume)
    [[ $# == 2 ]] || usage
    set_paths "$2"
    "cmd_$1"
    ;;
  mb)
    [[ $# == 3 ]] || usage
    set_paths "$2"
    cmd_mb "$3"
    ;;
  *) usage ;;
esac
