#!/usr/bin/env bash
# trace_bench.sh [BUILD_DIR] [BYTES]: throughput of `llmtap split`, `validate` and `stats` on
# a generated ~1 GB mixed chat/completions capture, against `jq -c` doing the same split
# (one pass per endpoint type), in the same run. Needs BUILD_DIR/llmtap and
# BUILD_DIR/bench/trace_gen (cmake --build BUILD_DIR --target llmtap trace_gen) and jq.
#
# The capture is written to BUILD_DIR/bench-tmp and read from the page cache (it was just
# written; a `cat` warms it again): this measures the tools, not the disk. Each llmtap tool
# runs 3 times and the best run counts (the machine may be shared); jq runs once.
# Checks while timing: llmtap's and jq's outputs hold the same rows per endpoint, and
# llmtap's outputs together are byte-for-byte the input's bytes. Prints a Markdown table.
# The generated files are removed at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
bench=trace_bench.sh default_bytes=1073741824
source bench/generated_capture.sh "$@"
command -v jq >/dev/null || { echo "trace_bench.sh: jq missing (apt-get install jq)" >&2; exit 2; }
cap=$tmp/trace_bench.jsonl
cleanup() { rm -f "$cap" "$tmp"/trace_bench.*.jsonl "$tmp"/jq.*.jsonl; }
trap cleanup EXIT
cleanup
generate_capture "$cap"

now() { date +%s.%N; }
best() {  # best CMD...: best wall time of 3 runs, in seconds
  local b="" t0 t1 t
  for _ in 1 2 3; do
    rm -f "$tmp"/trace_bench.chat.jsonl "$tmp"/trace_bench.completions.jsonl "$tmp"/trace_bench.other.jsonl
    t0=$(now)
    "$@" >/dev/null
    t1=$(now)
    t=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", b - a }')
    if [[ -z $b ]] || awk -v t="$t" -v b="$b" 'BEGIN { exit !(t < b) }'; then b=$t; fi
  done
  echo "$b"
}

t_split=$(best "$llmtap" split "$cap")
chat_rows=$(wc -l <"$tmp/trace_bench.chat.jsonl")
comp_rows=$(wc -l <"$tmp/trace_bench.completions.jsonl")
out_bytes=$(cat "$tmp/trace_bench.chat.jsonl" "$tmp/trace_bench.completions.jsonl" | wc -c)
t_validate=$(best "$llmtap" validate "$cap")
t_stats=$(best "$llmtap" stats "$cap")

t0=$(now)
jq -c 'select(.payload.messages)' "$cap" >"$tmp/jq.chat.jsonl"
jq -c 'select(.payload.prompt)' "$cap" >"$tmp/jq.completions.jsonl"
t1=$(now)
t_jq=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", b - a }')
jq_chat=$(wc -l <"$tmp/jq.chat.jsonl")
jq_comp=$(wc -l <"$tmp/jq.completions.jsonl")

ok=yes
[[ $jq_chat == "$chat_rows" && $jq_comp == "$comp_rows" ]] || ok="NO (row counts differ from jq)"
[[ $out_bytes == "$size" && $((chat_rows + comp_rows)) == "$rows" ]] || ok="NO (split lost bytes)"

gbs() { awk -v s="$size" -v t="$1" 'BEGIN { printf "%.3f", s / t / 1e9 }'; }
ratio() { awk -v j="$t_jq" -v t="$1" 'BEGIN { printf "%.0f", j / t }'; }
echo "Input: $size bytes, $rows rows ($chat_rows chat, $comp_rows completions); $(nproc) cores;" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg); outputs checked: $ok"
echo
echo "| tool | seconds | GB/s | vs jq -c split (2 passes) |"
echo "|---|---:|---:|---:|"
printf '| llmtap split | %.3f | %s | %sx |\n' "$t_split" "$(gbs "$t_split")" "$(ratio "$t_split")"
printf '| llmtap validate | %.3f | %s | %sx |\n' "$t_validate" "$(gbs "$t_validate")" "$(ratio "$t_validate")"
printf '| llmtap stats | %.3f | %s | %sx |\n' "$t_stats" "$(gbs "$t_stats")" "$(ratio "$t_stats")"
printf '| jq -c split | %.3f | %s | 1x |\n' "$t_jq" "$(gbs "$t_jq")"
[[ $ok == yes ]]
