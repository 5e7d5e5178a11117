#!/usr/bin/env bash
# writers_test.sh LLMTAP SOURCE_DIR: every kind of trace llmtap's capture and trace tools write,
# through AIPerf's own loader (check_traces.py): each must load with no row refused and every
# turn as its row means (payload values, timestamps, sessions). Anonymize's outputs have a test
# of their own.
#
# One proxy (the built-in simulator upstream) captures chat, streamed chat, multi-turn
# conversations named by a header, and completions, in mooncake_payload with outcomes; a second
# captures chat in raw_payload, with outcomes: its directory, and split's, are given to AIPerf as
# raw_payload directories (AIPerf reads every *.jsonl file in one; the sidecars must not be
# among them). Then: split, split --rebase, sessions then split, merge then
# split, convert both ways. A row holding an integer beyond 64 bits (a client's `seed`; the
# simulator refuses it, as vLLM does, and the row is still captured) is loaded by AIPerf, and so
# must be kept by every tool (AIPerf reads 2^64 as the float 2^64, equal to the row's value).
set -uo pipefail
llmtap=$(realpath "$1")
src=$(realpath "$2")
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

# start NAME ARGS...: an llmtap proxy on a free port; sets `url`.
start() {
  local name=$1
  shift
  "$llmtap" proxy --listen 127.0.0.1:0 "$@" >"$work/$name.log" 2>&1 &
  pids+=($!)
  # Until it listens or exits (120 s: a guard against a hang only).
  local deadline=$((SECONDS + 120))
  while ((SECONDS <= deadline)); do
    url=$(sed -n 's#.*listening on \(http://127\.0\.0\.1:[0-9]*\).*#\1#p' "$work/$name.log")
    [[ -n $url ]] && return
    kill -0 "${pids[-1]}" 2>/dev/null || break
    sleep 0.05
  done
  fail "proxy $name did not start: $(cat "$work/$name.log")"
}
# stop: SIGTERM the last proxy started and wait for it (it drains the capture).
stop() {
  kill -TERM "${pids[-1]}"
  wait "${pids[-1]}" || fail "proxy exited $?: $(cat "$work"/*.log)"
  unset 'pids[-1]'
}
post() {  # post PATH BODY [HEADER]
  curl -sf -o /dev/null "$url$1" -H 'content-type: application/json' ${3:+-H "$3"} -d "$2" ||
    fail "POST $1 failed"
}
post_any() {  # post_any PATH BODY: whatever the answer's status
  curl -s -o /dev/null "$url$1" -H 'content-type: application/json' -d "$2" || fail "POST $1 failed"
}

mkdir -p "$work/c" "$work/raw" "$work/out"
start mooncake --capture --capture-path "$work/c/requests.jsonl" --outcomes \
  --session-headers x-session-id
for i in 1 2 3; do
  post /v1/chat/completions "{\"model\":\"llmtap-sim\",\"messages\":[{\"role\":\"user\",\"content\":\"hello $i \\u00e9\"}],\"max_tokens\":8}"
  post /v1/chat/completions "{\"model\":\"llmtap-sim\",\"messages\":[{\"role\":\"user\",\"content\":\"stream $i\"}],\"max_tokens\":8,\"stream\":true,\"stream_options\":{\"include_usage\":true}}"
  post /v1/completions "{\"model\":\"llmtap-sim\",\"prompt\":\"complete $i\",\"max_tokens\":8}"
done
post_any /v1/chat/completions '{"model":"llmtap-sim","messages":[{"role":"user","content":"seeded"}],"max_tokens":8,"seed":18446744073709551616}'
# Three conversations of three turns, each turn the whole conversation so far; two name
# themselves by a header, one does not (`llmtap sessions` links it).
for c in a b c; do
  history="{\"role\":\"system\",\"content\":\"You are terse.\"},{\"role\":\"user\",\"content\":\"conversation $c turn 1\"}"
  for t in 1 2 3; do
    header=""
    [[ $c != c ]] && header="x-session-id: conv-$c"
    post /v1/chat/completions "{\"model\":\"llmtap-sim\",\"messages\":[$history],\"max_tokens\":8}" "$header"
    history="$history,{\"role\":\"assistant\",\"content\":\"answer $t\"},{\"role\":\"user\",\"content\":\"turn $((t + 1))\"}"
  done
done
stop

start raw --capture --capture-path "$work/raw/requests.jsonl" --capture-format raw_payload \
  --endpoint-pattern '^/v1/chat/completions$' --outcomes
for i in 1 2; do
  post /v1/chat/completions "{\"model\":\"llmtap-sim\",\"messages\":[{\"role\":\"user\",\"content\":\"raw $i\"}],\"max_tokens\":8}"
done
stop

# Every API a server speaks, through one proxy with endpoint_pattern widened: the sim answers
# chat, completions, embeddings and rerank; Responses and Messages are captured whatever the
# answer. Each row names its API (endpoint_type) where the body alone does not.
mkdir -p "$work/apis"
start apis --capture --capture-path "$work/apis/requests.jsonl" --outcomes --endpoint-pattern '.*'
post /v1/chat/completions '{"model":"llmtap-sim","messages":[{"role":"user","content":"chat"}],"max_tokens":4}'
post /v1/completions '{"model":"llmtap-sim","prompt":"complete","max_tokens":4}'
post_any /v1/responses '{"model":"llmtap-sim","input":"respond","max_output_tokens":4}'
post_any /v1/messages '{"model":"llmtap-sim","max_tokens":4,"messages":[{"role":"user","content":"anthropic"}]}'
post /v1/embeddings '{"model":"llmtap-sim","input":["embed me","and me"]}'
post /v1/rerank '{"model":"llmtap-sim","query":"q","documents":["a","b"]}'
post /v2/rerank '{"model":"llmtap-sim","query":"q2","documents":["c"]}'
stop

cd "$work/out"
run() { "$llmtap" "$@" >"$work/tool.log" 2>&1 || fail "llmtap $* exited $?: $(cat "$work/tool.log")"; }
c=$work/c/requests.jsonl
run split "$c" --out-dir split
run split "$c" --out-dir rebased --rebase
run sessions "$c" -o linked.jsonl
run split linked.jsonl --out-dir linked
run merge "$c" -o merged.jsonl
run split merged.jsonl --out-dir merged
"$llmtap" convert split/requests.chat.jsonl --to raw_payload -o chat.raw.jsonl >"$work/tool.log" 2>&1 ||
  fail "convert to raw: $(cat "$work/tool.log")"
run convert chat.raw.jsonl --to mooncake_payload --rate 5 -o chat.mooncake.jsonl
run split "$work/raw/requests.jsonl" --out-dir rawsplit

run split "$work/apis/requests.jsonl" --out-dir apis
for pair in chat:1 completions:1 responses:1 messages:1 embeddings:1 rankings:2; do
  api=${pair%%:*}
  n=$(wc -l <"apis/requests.$api.jsonl") || fail "split wrote no $api file: $(cat "$work/tool.log")"
  [[ $n == "${pair##*:}" ]] || fail "apis/requests.$api.jsonl has $n rows, not ${pair##*:}"
  [[ -s apis/requests.$api.jsonl.outcomes.ndjson ]] || fail "no outcomes beside the $api file"
done
[[ ! -e apis/requests.other.jsonl ]] || fail "split put rows in other: $(cat apis/requests.other.jsonl)"
grep -q '"endpoint_type":"messages"' apis/requests.messages.jsonl || fail "messages row without endpoint_type"
grep -q '"endpoint_type"' apis/requests.chat.jsonl && fail "a chat row carries endpoint_type"
for type in chat completions responses messages embeddings cohere_rankings; do
  grep -q -- "--endpoint-type $type " "$work/tool.log" || fail "split printed no command for $type: $(cat "$work/tool.log")"
done
grep -q -- "--endpoint-type embeddings --url" "$work/tool.log" ||
  fail "the embeddings command asks for streaming: $(cat "$work/tool.log")"
for api in chat completions responses messages embeddings rankings; do
  "$llmtap" validate "apis/requests.$api.jsonl" >"$work/validate.log" 2>&1 ||
    fail "validate apis/requests.$api.jsonl: $(cat "$work/validate.log")"
done

python3 "$src/tests/aiperf/check_traces.py" \
  split/requests.chat.jsonl split/requests.completions.jsonl \
  rebased/requests.chat.jsonl rebased/requests.completions.jsonl \
  linked/linked.chat.jsonl merged/merged.chat.jsonl merged/merged.completions.jsonl \
  chat.raw.jsonl chat.mooncake.jsonl "$work/raw" rawsplit \
  apis/requests.chat.jsonl apis/requests.completions.jsonl apis/requests.responses.jsonl \
  apis/requests.messages.jsonl apis/requests.embeddings.jsonl apis/requests.rankings.jsonl ||
  fail "AIPerf refused a file or sends something else than its rows mean (above)"
echo "writers: every trace loads in AIPerf as written"
