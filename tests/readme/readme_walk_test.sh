#!/usr/bin/env bash
# readme_walk_test.sh LLMTAP SOURCE_DIR: runs the README's walk as written. Every ```sh block
# that follows a `<!-- walk -->` line, in order, in one bash (so a block's variables reach the
# next) with `set -e`, in a temporary directory where `build/llmtap` is the binary under test
# and `node_modules` is tests/node's (for the openai client example). Fails on the first command
# that fails, with the walk's output.
set -uo pipefail
llmtap=$(realpath "$1")
src=$(realpath "$2")
tmp=$(mktemp -d)
cleanup() {
  # The walk runs in its own process group: a block that failed leaves no server behind.
  ((walk_pid)) && kill -- -"$walk_pid" 2>/dev/null
  rm -rf "$tmp"
}
walk_pid=0
trap cleanup EXIT
mkdir -p "$tmp/build"
ln -s "$llmtap" "$tmp/build/llmtap"
ln -s "$src/tests/node/node_modules" "$tmp/node_modules"

# The blocks, each preceded by an echo that names it.
awk '
  /^<!-- walk -->$/ { want = 1; next }
  want && /^```sh$/ { inside = 1; want = 0; n++; print "echo \"== README walk block " n "\""; next }
  inside && /^```$/ { inside = 0; next }
  inside { print }
' "$src/README.md" >"$tmp/walk.sh"
blocks=$(grep -c '^echo "== README walk block' "$tmp/walk.sh")
((blocks >= 4)) || { echo "FAIL: found $blocks walk blocks in README.md"; exit 1; }

cd "$tmp"
setsid timeout 240 bash -e "$tmp/walk.sh" >"$tmp/out" 2>&1 &
walk_pid=$!
if ! wait "$walk_pid"; then
  echo "FAIL: the README walk stopped; its output:"
  cat "$tmp/out"
  exit 1
fi
fails=0
check() {  # check DESCRIPTION TEST...
  local what=$1
  shift
  "$@" || { echo "FAIL: $what"; fails=$((fails + 1)); }
}
rows=$(wc -l <captures/requests.jsonl)
check "the capture holds the walk's 9 requests (it has $rows)" test "$rows" -eq 9
check "the capture names the Responses and Messages rows' APIs" \
  test "$(grep -c '"endpoint_type":"responses"' captures/requests.jsonl)" -eq 1 -a \
  "$(grep -c '"endpoint_type":"messages"' captures/requests.jsonl)" -eq 1
check "split wrote the Responses and Messages files" \
  test -s captures/split/requests.responses.jsonl -a -s captures/split/requests.messages.jsonl
check "a manifest was written" test -s captures/requests.jsonl.manifest.json
check "split wrote the chat file" test -s captures/split/requests.chat.jsonl
check "both replays wrote a report" test -s runs/as-captured/report.html -a -s runs/2x/report.html
check "compare printed both runs" grep -q "2x" "$tmp/out"
# AIPerf's own loader on every trace the walk wrote that one AIPerf run can replay (the split
# outputs of chat and completions, and the speculative-decoding capture).
traces=(captures/split/requests.chat.jsonl captures/spec.jsonl)
[[ -e captures/split/requests.completions.jsonl ]] && traces+=(captures/split/requests.completions.jsonl)
check "AIPerf loads and sends every trace as written" python3 "$src/tests/aiperf/check_traces.py" "${traces[@]}"
((fails == 0)) || { cat "$tmp/out"; exit 1; }
echo "README walk: $blocks blocks ran as written; $rows requests captured, replayed twice, compared"
