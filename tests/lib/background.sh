# background.sh: sourced by the scripts that start servers in the background
# (bench/proxy_vs_nginx.sh, bench/capture_responses_sse.sh). Sets `work` (a new temporary
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
