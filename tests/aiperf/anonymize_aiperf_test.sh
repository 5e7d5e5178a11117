#!/usr/bin/env bash
# anonymize_aiperf_test.sh LLMTAP SOURCE_DIR: `llmtap anonymize` output loaded by AIPerf's own
# loader (aiperf.sh, the referee) and replayed by `llmtap replay`, turn by turn.
#
# Captures (anonymize/make_captures.py): chat requests with a 10-turn conversation and three
# shorter sessions (one sharing its system prompt, one whose history is edited, one whose first
# answer is longer than what its next turn adds), outcomes with completion_tokens 0, max_tokens
# 0, an integer beyond 2^64; completions prompts; raw_payload requests. Each output goes through
# AIPerf once, at every option that changes what AIPerf loads:
#   chat         --key-file --session-key-file --id-map (new map), the outcomes sidecar;
#                chat endpoint, --fixed-schedule, --simulate-sessions
#   completions  --no-outcomes --default-output-length 0; completions endpoint, --fixed-schedule
#   raw          --format raw_payload (no timestamps), --id-map continued; chat endpoint
# and AIPerf must refuse nothing: no error, 0 rows rejected, 0 diffs (anonymize/check.py, which
# also checks the sessions against the captured prompt lengths and llmtap replay's bodies).
# --block-size 16 is refused (AIPerf takes 512 only) unless --replayer llmtap.
set -uo pipefail
llmtap=$(realpath "$1")
src=$(realpath "$2")
here=$src/tests/aiperf
tmp=$(mktemp -d)
stub_pid=
cleanup() {
  [[ -n $stub_pid ]] && kill "$stub_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
contains() { grep -qF -- "$2" "$1" || { fail "'$2' not in $1:"; cat "$1"; }; }
anonymize() {  # anonymize NAME EXIT [options...]: $tmp/NAME.summary
  local name=$1 want=$2
  shift 2
  "$llmtap" anonymize "$@" >"$tmp/$name.summary" 2>&1
  local got=$?
  [[ $got == "$want" ]] || { fail "anonymize $name: exit $got, want $want"; cat "$tmp/$name.summary"; }
}
load() {  # load NAME [aiperf_load.py options...]: $tmp/NAME.aiperf.json, $tmp/NAME.aiperf.rc
  local name=$1
  shift
  bash "$here/aiperf.sh" load "$tmp/$name.anon.jsonl" --type mooncake_trace \
    --json "$tmp/$name.aiperf.json" "$@" >/dev/null 2>"$tmp/$name.aiperf.err"
  echo $? >"$tmp/$name.aiperf.rc"
}

python3 "$here/anonymize/make_captures.py" "$tmp" || exit 1
cd "$tmp" || exit 1
head -c 32 /dev/urandom >k && head -c 32 /dev/urandom >sk && chmod 600 k sk

anonymize chat 0 chat.jsonl --tokenizer builtin --key-file k --session-key-file sk --id-map ids \
  -o chat.anon.jsonl
contains chat.summary "rows: 22 written of 22"
contains chat.summary "session turns: 12 later turns written as their new content"
contains chat.summary "2 started a new part of their session, written whole (it adds no more tokens than the previous turn's output_length: 1, its prompt does not continue the previous turn's: 1)"
contains chat.summary "output_length 0 written as 1 (AIPerf refuses 0): 2 rows (completion_tokens 0 in the outcome: 1, max_tokens 0 in the request: 1)"
contains chat.summary "1 rows hold an integer beyond 64 bits: read as a double, as AIPerf reads it"
# The captured prompts whole: the same capture without its session ids.
sed 's/,"session_id":"[^"]*"//' chat.jsonl >chat.nosess.jsonl
cp chat.jsonl.outcomes.ndjson chat.nosess.jsonl.outcomes.ndjson
anonymize whole 0 chat.nosess.jsonl --tokenizer builtin --key-file k -o chat.whole.jsonl

anonymize completions 0 completions.jsonl --tokenizer builtin --no-outcomes \
  --default-output-length 0 -o completions.anon.jsonl
contains completions.summary "output_length 0 written as 1 (AIPerf refuses 0): 6 rows (--default-output-length 0: 5, max_tokens 0 in the request: 1)"
anonymize raw 0 raw.jsonl --tokenizer builtin --format raw_payload --key-file k --id-map ids \
  -o raw.anon.jsonl
contains raw.summary "id map: ids ("
# The system prompt's first block has the number it got in chat.anon.jsonl.
[[ $(head -1 raw.anon.jsonl) == *'"hash_ids":[0,'* ]] || fail "raw: id map not continued: $(head -1 raw.anon.jsonl)"

anonymize b16 2 chat.jsonl --tokenizer builtin --block-size 16 -o b16.jsonl
contains b16.summary "--block-size 16: AIPerf (0.11) rebuilds a mooncake_trace's prompts from hash_ids in blocks of 512 tokens"
[[ ! -e b16.jsonl ]] || fail "refused output left behind"
anonymize b16llmtap 0 chat.jsonl --tokenizer builtin --block-size 16 --replayer llmtap -o b16.jsonl

# Once, so the three loads below do not each set up AIPerf's environment.
bash "$here/aiperf.sh" setup || { fail "aiperf.sh setup"; exit 1; }
load chat --endpoint-type chat --fixed-schedule --auto-offset --simulate-sessions &
load completions --endpoint-type completions --fixed-schedule --auto-offset &
load raw --endpoint-type chat &

# llmtap replay of the chat output, against a server that records the bodies and answers with
# the referee's 8-word answer.
python3 "$here/anonymize/stub_server.py" port chat.replay.jsonl &
stub_pid=$!
# Until it wrote its port (or exited): Python starting beside three AIPerf loads can take seconds
# on a loaded machine. 120 s is a guard against a hang only.
deadline=$((SECONDS + 120))
until [[ -s port ]] || ! kill -0 "$stub_pid" 2>/dev/null || ((SECONDS > deadline)); do sleep 0.05; done
[[ -s port ]] || fail "the replay stub server did not start"
"$llmtap" replay chat.anon.jsonl --url "http://127.0.0.1:$(cat port)" --hashed-endpoint chat \
  --speedup 1000 --server-metrics off --threads 1 >replay.out 2>&1 || { fail "replay"; cat replay.out; }
kill "$stub_pid"
stub_pid=
contains replay.out "22 sent, 22 completed, 0 errors"

wait  # the AIPerf loads
for name in chat completions raw; do
  [[ $(cat "$name.aiperf.rc") == 0 ]] || { fail "AIPerf refused $name"; cat "$name.aiperf.err"; }
done
python3 "$here/anonymize/check.py" "$tmp" || fails=$((fails + 1))
if ((fails)); then echo "$fails failures"; exit 1; fi
echo "anonymize output in AIPerf and llmtap replay: all checks pass"
