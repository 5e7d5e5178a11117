#!/usr/bin/env bash
# with_rgw.sh CMD [ARGS...]: runs CMD with a throw-away Ceph RGW (tests/lib/rgw.sh) on 127.0.0.1
# and the environment every S3 client reads pointing at it: AWS_ACCESS_KEY_ID,
# AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL_S3. The bucket LLMTAP_TEST_BUCKET exists;
# LLMTAP_RGW="rgw.sh" and LLMTAP_RGW_DIR let a test pause and resume the store. The store is
# stopped (by PID) and its directory removed when CMD ends; CMD's exit status is returned.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# A short path: Ceph's admin sockets live in it and Unix socket paths are limited to 107 bytes.
dir=$(mktemp -d /tmp/llmtap-rgw.XXXXXX)
cleanup() {
  "$here/rgw.sh" stop "$dir" >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
RGW_MEMSTORE_BYTES=${RGW_MEMSTORE_BYTES:-$((1 << 30))} "$here/rgw.sh" start "$dir" >/dev/null
# If this script is killed outright (SIGKILL from a test timeout: no trap runs), a watcher in its
# own session stops the store once this process is gone, so no daemons are left behind.
setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done
  "$2/rgw.sh" stop "$3" >/dev/null 2>&1; rm -rf "$3"' _ $$ "$here" "$dir" </dev/null >/dev/null 2>&1 &
set -a
# shellcheck disable=SC1091
. "$dir/env"
set +a
export AWS_ENDPOINT_URL_S3=$RGW_ENDPOINT LLMTAP_RGW="$here/rgw.sh" LLMTAP_RGW_DIR=$dir
export LLMTAP_TEST_BUCKET=llmtap-test
unset AWS_ENDPOINT_URL AWS_SESSION_TOKEN AWS_DEFAULT_REGION
"$here/rgw.sh" mb "$dir" "$LLMTAP_TEST_BUCKET" >/dev/null
rc=0
"$@" || rc=$?
exit "$rc"
