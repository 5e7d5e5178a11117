#!/usr/bin/env bash
# sessions_bench.sh [BUILD_DIR] [BYTES] [CONVERSATIONS]: throughput and peak memory of
# `llmtap sessions` on one core, on a generated multi-turn capture (bench/trace_gen, seed 1:
# CONVERSATIONS open chats, default 2000, each 2-24 turns that repeat the whole history, 30 % of
# the answers tool calls with their results; ~1 GiB by default), with peers measured in the same
# run on the same file: `cat FILE > OUT` (read and write the same bytes, the floor for a tool
# that rewrites a file), `llmtap validate` and `llmtap stats` (one full parse each).
# Needs BUILD_DIR/llmtap and BUILD_DIR/bench/trace_gen
# (cmake --build BUILD_DIR --target llmtap trace_gen), GNU time and taskset.
#
# Every command runs pinned to one core (CPU, default 1) three times; the best run counts (the
# machine may be shared). The capture is read from the page cache (written just before).
# Checks while timing: the sessions found equal the conversations the generator started (rows
# without an assistant message), every later turn is linked, none is left unlinked, and the
# output with its session ids taken out is the input byte for byte. Prints a Markdown table.
# The generated files are removed at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
bench=sessions_bench.sh default_bytes=1073741824
source bench/generated_capture.sh "${1:-build}" "${2:-}"
conversations=${3:-2000}
cpu=${CPU:-1}
cap=$tmp/sessions_bench.jsonl
out=$tmp/sessions_bench.out.jsonl
copy=$tmp/sessions_bench.copy.jsonl
cleanup() { rm -f "$cap" "$out" "$copy" "$tmp"/sessions_bench.report.json "$tmp"/sessions_bench.time; }
trap cleanup EXIT
cleanup
"$gen" "$cap" "$bytes" 1 "$conversations" 30 >/dev/null
size=$(stat -c %s "$cap")
rows=$(wc -l <"$cap")
first_turns=$(grep -vc '"role":"assistant"' "$cap" || true)
cat "$cap" >/dev/null

now() { date +%s.%N; }
best() {  # best CMD...: best wall time of 3 runs on one core, in seconds
  local b="" t0 t1 t
  for _ in 1 2 3; do
    rm -f "$out" "$copy"
    t0=$(now)
    taskset -c "$cpu" "$@" >/dev/null
    t1=$(now)
    t=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", b - a }')
    if [[ -z $b ]] || awk -v t="$t" -v b="$b" 'BEGIN { exit !(t < b) }'; then b=$t; fi
  done
  echo "$b"
}

t_sessions=$(best "$llmtap" sessions "$cap" -o "$out" --no-outcomes)
t_cat=$(best sh -c 'cat "$1" >"$2"' cat "$cap" "$copy")
t_validate=$(best "$llmtap" validate "$cap")
t_stats=$(best "$llmtap" stats "$cap")

# Peak memory, and the report to check.
rm -f "$out"
/usr/bin/time -v -o "$tmp/sessions_bench.time" taskset -c "$cpu" \
  "$llmtap" sessions "$cap" -o "$out" --no-outcomes --json >"$tmp/sessions_bench.report.json"
rss_kb=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$tmp/sessions_bench.time")
report=$tmp/sessions_bench.report.json
sessions=$(jq .sessions "$report")
linked=$(jq .linked "$report")
unlinked=$(jq .unlinked "$report")
peak_open=$(jq .peak_open_conversations "$report")
turns=$(jq -r '.turns_per_session | "mean \(.mean*100|round/100), p50 \(.p50), p99 \(.p99), max \(.max)"' "$report")

ok=yes
[[ $sessions == "$first_turns" ]] || ok="NO ($sessions sessions, $first_turns conversations generated)"
[[ $linked == $((rows - first_turns)) && $unlinked == 0 ]] || ok="NO ($linked linked, $unlinked unlinked)"
sed 's/,"session_id":"conv-[0-9]*"}$/}/' "$out" | cmp -s - "$cap" || ok="NO (output is not the input plus ids)"

mbs() { awk -v s="$size" -v t="$1" 'BEGIN { printf "%.0f", s / t / 1e6 }'; }
ratio() { awk -v a="$1" -v b="$t_sessions" 'BEGIN { printf "%.2f", a / b }'; }
echo "Input: $size bytes, $rows rows, $first_turns conversations (turns per session: $turns);" \
  "$(nproc) cores, one used (taskset -c $cpu); load average $(cut -d' ' -f1-3 /proc/loadavg);" \
  "checks: $ok"
echo
echo "| command (one core) | seconds | MB/s | time / sessions' |"
echo "|---|---:|---:|---:|"
printf '| llmtap sessions -o OUT | %.3f | %s | 1.00 |\n' "$t_sessions" "$(mbs "$t_sessions")"
printf '| cat FILE > OUT | %.3f | %s | %s |\n' "$t_cat" "$(mbs "$t_cat")" "$(ratio "$t_cat")"
printf '| llmtap validate | %.3f | %s | %s |\n' "$t_validate" "$(mbs "$t_validate")" "$(ratio "$t_validate")"
printf '| llmtap stats | %.3f | %s | %s |\n' "$t_stats" "$(mbs "$t_stats")" "$(ratio "$t_stats")"
echo
echo "llmtap sessions peak RSS: $((rss_kb / 1024)) MiB ($peak_open conversations open at most)"
[[ $ok == yes ]]
