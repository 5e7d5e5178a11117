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
contains "$tmp/out" "OK: every row would load in AIPerf 0.11.0"
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
contains "$tmp/out" "aiperf profile --model llama --endpoint-type chat --streaming --url localhost:8000 --custom-dataset-type mooncake_trace --input-file $tmp/mixed_mooncake.chat.jsonl --fixed-schedule --fixed-schedule-auto-offset"
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
done <"$tmp/oc/cap.jsonl" | tac >"$tmp/oc/cap.jsonl.outcomes.ndjson"
expect 0 "split with outcomes" -- "$llmtap" split "$tmp/oc/cap.jsonl" --rebase
contains "$tmp/out" "3 outcomes -> $tmp/oc/cap.chat.jsonl.outcomes.ndjson"
contains "$tmp/out" "outcomes: 5 of 6 carried from $tmp/oc/cap.jsonl.outcomes.ndjson (dropped: 1 timestamp differs from the row's, 0 row not routed or absent)"
contains "$tmp/out" "line 5: timestamp 1201 in the sidecar, 1200 in the capture"
contains "$tmp/oc/cap.chat.jsonl.outcomes.ndjson" '{"line":2,"timestamp":50,"status":200,"completion_tokens":33}'
contains "$tmp/oc/cap.completions.jsonl.outcomes.ndjson" '{"line":1,"timestamp":0,"status":200,"completion_tokens":22}'
[[ $(stat -c %a "$tmp/oc/cap.chat.jsonl.outcomes.ndjson") == 600 ]] || { echo "FAIL: sidecar mode"; fails=$((fails + 1)); }
expect 2 "split: another file's sidecar" -- "$llmtap" split "$tmp/oc/cap.chat.jsonl" --outcomes "$tmp/oc/cap.jsonl.outcomes.ndjson"
contains "$tmp/err" "the outcomes sidecar $tmp/oc/cap.jsonl.outcomes.ndjson does not belong to $tmp/oc/cap.chat.jsonl"
[[ ! -e $tmp/oc/cap.chat.chat.jsonl ]] || { echo "FAIL: refused split left an output"; fails=$((fails + 1)); }
expect 2 "split: --outcomes and --no-outcomes" -- "$llmtap" split "$tmp/oc/cap.jsonl" --outcomes x --no-outcomes
expect 0 "split --no-outcomes" -- "$llmtap" split "$tmp/oc/cap.jsonl" --no-outcomes --out-dir "$tmp/oc/plain"
[[ ! -e $tmp/oc/plain/cap.chat.jsonl.outcomes.ndjson ]] || { echo "FAIL: --no-outcomes wrote a sidecar"; fails=$((fails + 1)); }

# split keeps a session's rows together and refuses a row that would mix endpoint types.
{
  printf '{"timestamp":0,"payload":{"messages":[{"role":"user","content":"a"}]},"session_id":"s1"}\n'
  printf '{"timestamp":5,"payload":{"prompt":"b"},"session_id":"s1"}\n'
  printf '{"timestamp":9,"payload":{"messages":[{"role":"user","content":"c"}]},"session_id":"s1"}\n'
} >"$tmp/oc/sess.jsonl"
expect 1 "split: a session mixing endpoint types" -- "$llmtap" split "$tmp/oc/sess.jsonl"
contains "$tmp/out" "sess.jsonl:2: a completions row in a session whose first row (line 1) is chat: not routed"
contains "$tmp/out" "1 sessions mix chat and completions rows"
[[ $(wc -l <"$tmp/oc/sess.chat.jsonl") == 2 && ! -e $tmp/oc/sess.completions.jsonl ]] ||
  { echo "FAIL: session rows not kept together"; fails=$((fails + 1)); }
expect 0 "split --help says how sessions go" -- "$llmtap" split --help
contains "$tmp/out" "Sessions: the rows of one session_id stay together"

expect 0 "stats" -- "$llmtap" stats "$data/mixed_mooncake.jsonl"
contains "$tmp/out" "effective sample rate: 0.5000"
expect 0 "stats --json" -- "$llmtap" stats --json "$data/hashed.jsonl"
contains "$tmp/out" '"cache_hit_rate"'

expect 0 "merge" -- "$llmtap" merge "$data/replica_a.jsonl" "$data/replica_b.jsonl" -o "$tmp/m.jsonl"
[[ -f $tmp/m.jsonl.manifest.json ]] || { echo "FAIL: merge manifest"; fails=$((fails + 1)); }
# Sessions: validate's rules, stats' turns and think time, merge keeping replicas' ids apart.
mkdir -p "$tmp/ss"
for r in a b; do
  printf '{"timestamp":0,"payload":{"messages":[{"role":"user","content":"%s"}]},"session_id":"s1"}\n{"timestamp":900,"payload":{"messages":[{"role":"user","content":"%s2"}]},"session_id":"s1"}\n' "$r" "$r" >"$tmp/ss/$r.jsonl"
  printf '{"format":"mooncake_payload","timestamp_zero_unix_ms":1764700000000,"host":"gpu-%s","pid":1,"started_utc":"2025-12-02T18:26:40Z"}' "$r" >"$tmp/ss/$r.jsonl.manifest.json"
done
printf '{"line":1,"timestamp":0,"status":200,"latency_ms":400}\n' >"$tmp/ss/a.jsonl.outcomes.ndjson"
expect 0 "validate sessions" -- "$llmtap" validate "$tmp/ss/a.jsonl"
contains "$tmp/out" "sessions: 1 (2 rows with a session_id"
expect 0 "stats sessions" -- "$llmtap" stats "$tmp/ss/a.jsonl"
contains "$tmp/out" "think time (response end to next turn), ms: mean 500.0"
expect 0 "stats --no-outcomes" -- "$llmtap" stats --no-outcomes "$tmp/ss/a.jsonl"
contains "$tmp/out" "think time: needs the outcomes sidecar"
expect 0 "merge sessions of two replicas" -- "$llmtap" merge "$tmp/ss/a.jsonl" "$tmp/ss/b.jsonl" -o "$tmp/ss/m.jsonl"
contains "$tmp/out" "4 rows have theirs written as <replica>:<id>"
contains "$tmp/ss/m.jsonl" '"session_id":"gpu-a:s1"'
contains "$tmp/ss/m.jsonl" '"session_id":"gpu-b:s1"'
expect 0 "merge --keep-session-ids" -- "$llmtap" merge "$tmp/ss/a.jsonl" "$tmp/ss/b.jsonl" --keep-session-ids -o "$tmp/ss/k.jsonl"
[[ $(grep -c '"session_id":"s1"' "$tmp/ss/k.jsonl") == 4 ]] || { echo "FAIL: --keep-session-ids"; fails=$((fails + 1)); }
printf '{"timestamp":1000,"payload":{"prompt":"x"},"session_id":"s1"}\n' >>"$tmp/ss/b.jsonl"
expect 0 "validate: a session mixing chat and completions loads in AIPerf (a warning)" -- "$llmtap" validate "$tmp/ss/b.jsonl"
contains "$tmp/out" "b.jsonl:3: warning (session-endpoint): session_id of line 1 is a chat session and this is a completions request"
expect 0 "validate --help names the AIPerf version and the deliberate warnings" -- "$llmtap" validate --help
contains "$tmp/out" "AIPerf 0.11.0"
contains "$tmp/out" "  session-endpoint: "
printf '{"input_length":5}\n{"input_length":6}\n' >"$tmp/ss/untimed.jsonl"
expect 0 "validate: no timestamps" -- "$llmtap" validate "$tmp/ss/untimed.jsonl"
expect 1 "validate --fixed-schedule: every session's first row needs a timestamp" -- "$llmtap" validate --fixed-schedule "$tmp/ss/untimed.jsonl"
contains "$tmp/out" "untimed.jsonl:2: no 'timestamp' on the first row of a session"

expect 2 "merge without manifest" -- "$llmtap" merge "$data/replica_a.jsonl" "$data/hashed.jsonl" -o "$tmp/m2.jsonl"
contains "$tmp/err" "--assume-aligned"

# Chat rows only (AIPerf's raw_payload loader refuses a file with a row without 'messages'):
# the completions and embeddings rows are named, exit 1.
expect 1 "convert to raw" -- "$llmtap" convert "$data/mixed_mooncake.jsonl" --to raw_payload -o "$tmp/r.jsonl"
contains "$tmp/out" "mixed_mooncake.jsonl:2: a completions request: AIPerf's raw_payload loader takes chat requests only"
expect 0 "convert to mooncake" -- "$llmtap" convert "$tmp/r.jsonl" --to mooncake_payload --rate 5 -o "$tmp/mc.jsonl"
expect 0 "validate converted" -- "$llmtap" validate "$tmp/mc.jsonl"
expect 2 "convert same format" -- "$llmtap" convert "$tmp/r.jsonl" --to raw_payload -o "$tmp/r2.jsonl"
[[ ! -e $tmp/r2.jsonl ]] || { echo "FAIL: convert left an output behind"; fails=$((fails + 1)); }

if ((fails)); then echo "$fails failures"; exit 1; fi
echo "trace CLI: all checks pass"
