# background.sh: sourced by the scripts that start servers in the background
# (bench/proxy_vs_nginx.sh, bench/proxy_shadow.sh, ...). Sets `work` (a new temporary
# directory) and `pids` (append each background process to it); at exit every one of them is
# killed and waited for and `work` is removed. SIGINT or SIGTERM exits 130 through that.
work=$(mktemp -d)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_port FILE -> the port of the first "listening on http://127.0.0.1:PORT" line the server
# writes to FILE (empty after 20 s without one).
wait_port() {
  local _
  for _ in $(seq 400); do grep -q 'listening on' "$1" 2>/dev/null && break; sleep 0.05; done
  sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$1" | head -1
}
# cpu_ticks PID -> the process's utime + stime in clock ticks (getconf CLK_TCK per second).
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
