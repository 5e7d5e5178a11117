#!/usr/bin/env bash
# zstd_bench.sh [BUILD_DIR] [MIB] [RUNS]: zstd on realistic captures, as the capture uploader
# compresses finished files (`compress: zstd`): ratio, and MB/s on one core to compress and to
# read back, for levels 1 and 3 with the level's own window and for level 3 (the uploader's
# setting) and 9 with a 16 MiB long-distance window.
#
# Two generated captures of MIB MiB each (default 256; bench/trace_gen, seed 1): "mixed" (chat
# with 4 shared system prompts and 1-8 random turns, and completions) and "multi-turn" (256 open
# conversations; each row carries its conversation's whole history, as agents and chat products
# send it). Median of RUNS runs (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
mib=${2:-256}
runs=${3:-3}
bench=zstd_bench
# shellcheck source=bench/generated_capture.sh
. bench/generated_capture.sh "${1:-build}" $((mib << 20)) bench/upload_bench
tool=$build/bench/upload_bench

for kind in mixed multi-turn; do
  file=$tmp/zstd-$kind.jsonl
  rm -f "$file"
  if [[ $kind == mixed ]]; then
    "$gen" "$file" "$bytes" 1 >/dev/null
  else
    "$gen" "$file" "$bytes" 1 256 >/dev/null
  fi
  size=$(stat -c %s "$file")
  cat "$file" >/dev/null
  echo "$bench: $kind capture, $(numfmt --to=iec "$size"), $(wc -l <"$file") rows"
  for setting in "1 0" "3 0" "3 24" "9 24"; do
    read -r level window <<<"$setting"
    c=() d=() z=0
    for ((r = 0; r < runs; r++)); do
      read -r _ _ z cs ds < <("$tool" zstd "$file" "$level" "$window")
      c+=("$cs") d+=("$ds")
    done
    mc=$(median "${c[@]}") md=$(median "${d[@]}")
    awk -v k="$kind" -v l="$level" -v w="$window" -v s="$size" -v z="$z" -v c="$mc" -v d="$md" \
      -v b="$bench" 'BEGIN {
        printf "%s: %-10s level %d %-14s ratio %5.1fx  compress %6.0f MB/s  read back %6.0f MB/s\n",
          b, k, l, (w > 0 ? "window 2^" w : "own window"), s / z, s / c / 1e6, s / d / 1e6 }'
  done
  rm -f "$file"
done
