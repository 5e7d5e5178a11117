#!/usr/bin/env bash
# Capture-core benchmarks with their peers, measured in the same run:
#   - Offer() hot path (decide + compact + enqueue) for 1 KB / 4 KB / 64 KB chat bodies,
#     capture off, path not matched;
#   - the writer's sustained MB/s to a file, against `dd bs=1M` to the same filesystem.
# Usage: bench/capture_bench.sh [DIR]   (DIR: where files are written; default ./build/bench-tmp)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build/bench-tmp}
mkdir -p "$dir"
scripts/build.sh build >/dev/null
mib=1024

echo "== Offer() hot path"
build/bench/capture_bench --benchmark_filter='BM_Offer' --benchmark_repetitions=5 \
  --benchmark_report_aggregates_only=true 2>/dev/null | grep -E '^BM_.*(median|cv)'

dd_mbps() {
  rm -f "$dir/dd.out"
  local out
  out=$(dd if=/dev/zero of="$dir/dd.out" bs=1M count=$mib conv=fdatasync 2>&1 | tail -1)
  rm -f "$dir/dd.out"
  # "... bytes (...) copied, 0.61 s, 1.8 GB/s" -> bytes / seconds
  awk -v b=$((mib * 1048576)) '{for (i = 1; i <= NF; i++) if ($i == "s,") s = $(i-1)} END {printf "%.0f", b / s / 1e6}' <<<"$out"
}
writer_mbps() {  # $1: benchmark name
  LLMTAP_BENCH_DIR="$dir" build/bench/capture_bench --benchmark_filter="^$1/" \
    --benchmark_format=json 2>/dev/null |
    python3 -c 'import json,sys; b=json.load(sys.stdin)["benchmarks"][0]; print("%.0f" % (b["bytes_per_second"]/1e6))'
}

echo "== writer vs dd bs=1M, ${mib} MiB each, fdatasync included, 4 rounds"
# Each measurement starts after `sync` and a pause, so none pays for the previous one's
# writeback or file deletion; the order alternates between rounds.
settle() { sync; sleep 2; }
for round in 1 2 3 4; do
  if ((round % 2)); then
    settle; d=$(dd_mbps)
    settle; w=$(writer_mbps BM_Writer/drain)
    settle; p=$(writer_mbps BM_Writer/with_producer)
  else
    settle; p=$(writer_mbps BM_Writer/with_producer)
    settle; w=$(writer_mbps BM_Writer/drain)
    settle; d=$(dd_mbps)
  fi
  awk -v d="$d" -v w="$w" -v p="$p" -v r=$round 'BEGIN {
    printf "round %d: dd %d MB/s | writer alone %d MB/s (%.2fx dd) | writer with producer %d MB/s (%.2fx dd)\n",
      r, d, w, w / d, p, p / d}'
done
