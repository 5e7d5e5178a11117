#!/usr/bin/env bash
# trace_cli_test.sh LLMTAP SOURCE_DIR: the trace subcommands end to end -- exit codes, help,
# and the files they leave. The library tests cover the logic; this checks the wiring.
set -uo pipefail
source "$2/tests/lib/cli_test.sh"

for cmd in split validate stats merge convert; do
  expect 0 "$cmd --help" -- "$llmtap" "$cmd" --help
  contains "$tmp/out" "Exit codes"
done
expect 0 "validate good" -- "$llmtap" validate "$data/mixed_mooncake.jsonl"
contains "$tmp/out" "OK: every row would load in AIPerf"
expect 1 "validate bad" -- "$llmtap" validate "$data/malformed_torn.jsonl"
contains "$tmp/out" "malformed_torn.jsonl:8: torn last line"
expect 1 "validate --json" -- "$llmtap" validate --json --endpoint-type chat "$data/mixed_raw.jsonl"
contains "$tmp/out" '"failed": 2'
expect 2 "validate missing" -- "$llmtap" validate "$tmp/nope.jsonl"
contains "$tmp/out" "nope.jsonl"
expect 2 "an unknown flag is a usage error (not CLI11's 109)" -- "$llmtap" validate --no-such-flag "$data/mixed_mooncake.jsonl"
expect 2 "a bad flag value is a usage error" -- "$llmtap" proxy --threads x
expect 2 "no subcommand is a usage error" -- "$llmtap"

expect 0 "split" -- "$llmtap" split "$data/mixed_mooncake.jsonl" --out-dir "$tmp"
contains "$tmp/out" "aiperf profile --model llama --endpoint-type chat --streaming --url localhost:8000 --custom-dataset-type mooncake_trace --input-file $tmp/mixed_mooncake.chat.jsonl"
[[ $(stat -c %a "$tmp/mixed_mooncake.chat.jsonl") == 600 ]] || { echo "FAIL: mode"; fails=$((fails + 1)); }
expect 2 "split again refuses" -- "$llmtap" split "$data/mixed_mooncake.jsonl" --out-dir "$tmp"
contains "$tmp/err" "--force"
expect 0 "split --force" -- "$llmtap" split "$data/mixed_mooncake.jsonl" --out-dir "$tmp" --force --rebase

# split carries the outcomes sidecar: each output gets its rows' outcomes, line renumbered and
# timestamp rebased; an outcome whose timestamp differs from its row's is dropped and counted.
mkdir -p "$tmp/oc"
cp "$data/mixed_mooncake.jsonl" "$tmp/oc/cap.jsonl"
n=0
while IFS= read -r row; do
  n=$((n + 1))
  ts=$(sed -E 's/^\{"timestamp":([0-9]+).*/\1/' <<<"$row")
  ((n == 5)) && ts=$((ts + 1))  # altered
  printf '{"line":%s,"timestamp":%s,"status":200,"completion_tokens":%s}\n' "$n" "$ts" "$((n * 11))"
done <"$tmp/oc/cap.jsonl" | tac >"$tmp/oc/cap.jsonl.outcomes.jsonl"
expect 0 "split with outcomes" -- "$llmtap" split "$tmp/oc/cap.jsonl" --rebase
contains "$tmp/out" "3 outcomes -> $tmp/oc/cap.chat.jsonl.outcomes.jsonl"
contains "$tmp/out" "outcomes: 5 of 6 carried from $tmp/oc/cap.jsonl.outcomes.jsonl (dropped: 1 timestamp differs from the row's, 0 row not routed or absent)"
contains "$tmp/out" "line 5: timestamp 1201 in the sidecar, 1200 in the capture"
contains "$tmp/oc/cap.chat.jsonl.outcomes.jsonl" '{"line":2,"timestamp":50,"status":200,"completion_tokens":33}'
contains "$tmp/oc/cap.completions.jsonl.outcomes.jsonl" '{"line":1,"timestamp":0,"status":200,"completion_tokens":22}'
[[ $(stat -c %a "$tmp/oc/cap.chat.jsonl.outcomes.jsonl") == 600 ]] || { echo "FAIL: sidecar mode"; fails=$((fails + 1)); }
expect 2 "split: another file's sidecar" -- "$llmtap" split "$tmp/oc/cap.chat.jsonl" --outcomes "$tmp/oc/cap.jsonl.outcomes.jsonl"
contains "$tmp/err" "the outcomes sidecar $tmp/oc/cap.jsonl.outcomes.jsonl does not belong to $tmp/oc/cap.chat.jsonl"
[[ ! -e $tmp/oc/cap.chat.chat.jsonl ]] || { echo "FAIL: refused split left an output"; fails=$((fails + 1)); }
expect 2 "split: --outcomes and --no-outcomes" -- "$llmtap" split "$tmp/oc/cap.jsonl" --outcomes x --no-outcomes
expect 0 "split --no-outcomes" -- "$llmtap" split "$tmp/oc/cap.jsonl" --no-outcomes --out-dir "$tmp/oc/plain"
[[ ! -e $tmp/oc/plain/cap.chat.jsonl.outcomes.jsonl ]] || { echo "FAIL: --no-outcomes wrote a sidecar"; fails=$((fails + 1)); }

expect 0 "stats" -- "$llmtap" stats "$data/mixed_mooncake.jsonl"
contains "$tmp/out" "effective sample rate: 0.5000"
expect 0 "stats --json" -- "$llmtap" stats --json "$data/hashed.jsonl"
contains "$tmp/out" '"cache_hit_rate"'

expect 0 "merge" -- "$llmtap" merge "$data/replica_a.jsonl" "$data/replica_b.jsonl" -o "$tmp/m.jsonl"
[[ -f $tmp/m.jsonl.manifest.json ]] || { echo "FAIL: merge manifest"; fails=$((fails + 1)); }
expect 2 "merge without manifest" -- "$llmtap" merge "$data/replica_a.jsonl" "$data/hashed.jsonl" -o "$tmp/m2.jsonl"
contains "$tmp/err" "--assume-aligned"

expect 0 "convert to raw" -- "$llmtap" convert "$data/mixed_mooncake.jsonl" --to raw_payload -o "$tmp/r.jsonl"
expect 0 "convert to mooncake" -- "$llmtap" convert "$tmp/r.jsonl" --to mooncake_payload --rate 5 -o "$tmp/mc.jsonl"
expect 0 "validate converted" -- "$llmtap" validate "$tmp/mc.jsonl"
expect 2 "convert same format" -- "$llmtap" convert "$tmp/r.jsonl" --to raw_payload -o "$tmp/r2.jsonl"
[[ ! -e $tmp/r2.jsonl ]] || { echo "FAIL: convert left an output behind"; fails=$((fails + 1)); }

if ((fails)); then echo "$fails failures"; exit 1; fi
echo "trace CLI: all checks pass"
