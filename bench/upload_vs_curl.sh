#!/usr/bin/env bash
# upload_vs_curl.sh [BUILD_DIR] [MIB] [ROUNDS]: upload throughput of the capture uploader vs
# `curl -T` of the same file to the same local Ceph RGW, side by side in one run.
#
# A MIB-sized capture (bench/trace_gen, default 256 MiB) is uploaded ROUNDS times (default 5) by
# each, alternating (curl first in odd rounds, the uploader first in even ones, so drift in the
# machine's speed hits both alike). curl sends it as one PUT (--aws-sigv4, UNSIGNED-PAYLOAD);
# the uploader as the proxy does: 16 MiB multipart parts, SHA-256 while reading, then the
# manifest (PART_MIB sets another part size). Prints each round and the medians and their ratio
# (uploader / curl throughput).
set -euo pipefail
cd "$(dirname "$0")/.."
mib=${2:-256}
rounds=${3:-5}
bench=upload_vs_curl
# shellcheck source=bench/generated_capture.sh
. bench/generated_capture.sh "${1:-build}" $((mib << 20)) bench/upload_bench
upload=$build/bench/upload_bench

file=$tmp/upload.jsonl
rm -f "$file"
generate_capture "$file"
# shellcheck source=tests/lib/rgw_env.sh
. tests/lib/rgw_env.sh
RGW_MEMSTORE_BYTES=$((8 << 30)) start_rgw bench
calc() { awk "BEGIN { printf \"%.6f\", $1 }"; }
s3curl() {
  curl -sS --fail --noproxy '*' --aws-sigv4 "aws:amz:$AWS_REGION:s3" \
    -u "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$@"
}
run_curl() {  # prints seconds
  local t0 t1
  t0=$(date +%s.%N)
  s3curl -o /dev/null -T "$file" "$RGW_ENDPOINT/bench/curl/upload.jsonl"
  t1=$(date +%s.%N)
  calc "$t1 - $t0"
  s3curl -o /dev/null -X DELETE "$RGW_ENDPOINT/bench/curl/upload.jsonl"
}
run_llmtap() {  # prints seconds
  local r=$1 out
  out=$("$upload" upload "$file" "s3://bench/run$r/" "${PART_MIB:-16}")
  s3curl -o /dev/null -X DELETE "$RGW_ENDPOINT/bench/run$r/bench/requests.20260101T000000.000Z.jsonl"
  echo "$out" | awk '{print $3}'
}
echo "$bench: $(numfmt --to=iec "$size") capture, $rows rows, $rounds rounds, RGW at $RGW_ENDPOINT"
curl_s=() llmtap_s=()
for ((r = 1; r <= rounds; r++)); do
  if ((r % 2)); then
    c=$(run_curl); l=$(run_llmtap "$r")
  else
    l=$(run_llmtap "$r"); c=$(run_curl)
  fi
  curl_s+=("$c") llmtap_s+=("$l")
  printf '%s: round %d: curl -T %.3f s (%.0f MB/s), uploader %.3f s (%.0f MB/s)\n' "$bench" "$r" \
    "$c" "$(calc "$size / $c / 1000000")" "$l" "$(calc "$size / $l / 1000000")"
  sleep 6  # RGW frees deleted objects' memory a few seconds later
done
mc=$(median "${curl_s[@]}") ml=$(median "${llmtap_s[@]}")
printf '%s: median curl -T %.0f MB/s, uploader %.0f MB/s: uploader/curl throughput %.3f\n' \
  "$bench" "$(calc "$size / $mc / 1000000")" "$(calc "$size / $ml / 1000000")" "$(calc "$mc / $ml")"
