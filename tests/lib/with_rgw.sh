#!/usr/bin/env bash
# with_rgw.sh CMD [ARGS...]: runs CMD with a throw-away Ceph RGW on 127.0.0.1 (rgw_env.sh) and the
# environment every S3 client reads pointing at it: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
# AWS_REGION, AWS_ENDPOINT_URL_S3. The bucket LLMTAP_TEST_BUCKET exists; LLMTAP_RGW ("rgw.sh") and
# LLMTAP_RGW_DIR let a test pause and resume the store. The store is stopped (by PID) and its
# directory removed when CMD ends; CMD's exit status is returned.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/lib/rgw_env.sh
. "$here/rgw_env.sh"
export LLMTAP_TEST_BUCKET=llmtap-test
RGW_MEMSTORE_BYTES=${RGW_MEMSTORE_BYTES:-$((1 << 30))} start_rgw "$LLMTAP_TEST_BUCKET"
rc=0
"$@" || rc=$?
exit "$rc"
