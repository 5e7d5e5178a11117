#!/usr/bin/env bash
# upload_overhead.sh [BUILD_DIR] [SECONDS] [ROUNDS]: what fleet upload costs the proxy. Runs
# bench/proxy_vs_nginx.sh (plain requests, wrk -c32 by default: CONCS, MODES override) with
# llmtap-on capturing with --compress zstd and --upload-url to a local Ceph RGW, rotating every
# ROTATE_SECONDS (default 2) so that compression and upload run all along. The CPU time of the
# llmtap-on process (event loop, writer, uploader, zstd) per request is compared with
# llmtap-off's in the same run ("capture on vs off: ... CPU/req").
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rgw=$(mktemp -d /tmp/llmtap-rgw.XXXXXX)
trap 'tests/lib/rgw.sh stop "$rgw" >/dev/null 2>&1 || true; rm -rf "$rgw"' EXIT
RGW_MEMSTORE_BYTES=$((8 << 30)) tests/lib/rgw.sh start "$rgw" >/dev/null
set -a
. "$rgw/env"
set +a
export AWS_ENDPOINT_URL_S3=$RGW_ENDPOINT
tests/lib/rgw.sh mb "$rgw" bench >/dev/null
echo "upload_overhead: RGW at $RGW_ENDPOINT"
CONCS=${CONCS:-32} MODES=${MODES:-plain} SKIP_SSE=1 \
  LLMTAP_ON_ARGS="--upload-url s3://bench/overhead/ --compress zstd --rotate-seconds ${ROTATE_SECONDS:-2}" \
  bench/proxy_vs_nginx.sh "$build" "${2:-5}" "${3:-5}"
