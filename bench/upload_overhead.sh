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
# shellcheck source=tests/lib/rgw_env.sh
. tests/lib/rgw_env.sh
RGW_MEMSTORE_BYTES=$((8 << 30)) start_rgw bench
echo "upload_overhead: RGW at $RGW_ENDPOINT"
CONCS=${CONCS:-32} MODES=${MODES:-plain} SKIP_SSE=1 \
  LLMTAP_ON_ARGS="--upload-url s3://bench/overhead/ --compress zstd --rotate-seconds ${ROTATE_SECONDS:-2}" \
  bench/proxy_vs_nginx.sh "$build" "${2:-5}" "${3:-5}"
