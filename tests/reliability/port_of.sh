# Sourced by the reliability scripts (disk_latency.sh, soak.sh).
#
# port_of LOG PID [TRIES]: waits (TRIES x 50 ms, default 200) until the server PID, writing
# its stdout to LOG (stderr to LOG.err), prints "listening on http://127.0.0.1:PORT"; prints
# PORT. Exits 2 with the logs on stderr when the server exits or the time runs out.
port_of() {
  local log=$1 pid=$2 tries=${3:-200}
  for _ in $(seq "$tries"); do
    if grep -qE 'listening on http://127\.0\.0\.1:[0-9]+' "$log" 2>/dev/null; then
      grep -oE 'listening on http://127\.0\.0\.1:[0-9]+' "$log" | head -1 | grep -oE '[0-9]+$'
      return
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  echo "${0##*/}: the server logging to $log did not start: $(cat "$log" "$log.err" 2>/dev/null)" >&2
  exit 2
}
