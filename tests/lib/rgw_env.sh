# rgw_env.sh: sourced by tests and benchmarks that need an S3 store. Defines
#   start_rgw [BUCKET...]
# which starts a throw-away Ceph RGW (rgw.sh) in a new directory under /tmp (RGW_MEMSTORE_BYTES
# sizes it), exports what every S3 client reads (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
# AWS_REGION, AWS_ENDPOINT_URL_S3) and LLMTAP_RGW / LLMTAP_RGW_DIR (for rgw.sh pause and
# resume), creates the buckets, and stops the store and removes its directory when the sourcing
# shell exits (an EXIT trap) or, should it be killed outright, soon after (a watcher).
rgw_lib=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

start_rgw() {
  # A short path: Ceph's admin sockets live in it, and Unix socket paths hold 107 bytes.
  rgw_dir=$(mktemp -d /tmp/llmtap-rgw.XXXXXX)
  trap '"$rgw_lib/rgw.sh" stop "$rgw_dir" >/dev/null 2>&1 || true; rm -rf "$rgw_dir"' EXIT
  "$rgw_lib/rgw.sh" start "$rgw_dir" >/dev/null
  setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done
    "$2/rgw.sh" stop "$3" >/dev/null 2>&1; rm -rf "$3"' _ $$ "$rgw_lib" "$rgw_dir" \
    </dev/null >/dev/null 2>&1 &
  set -a
  # shellcheck disable=SC1091
  . "$rgw_dir/env"
  set +a
  export AWS_ENDPOINT_URL_S3=$RGW_ENDPOINT LLMTAP_RGW="$rgw_lib/rgw.sh" LLMTAP_RGW_DIR=$rgw_dir
  unset AWS_ENDPOINT_URL AWS_SESSION_TOKEN AWS_DEFAULT_REGION
  local bucket
  for bucket in "$@"; do "$rgw_lib/rgw.sh" mb "$rgw_dir" "$bucket" >/dev/null; done
}
