#!/usr/bin/env bash
# html_chromium_test.sh LLMTAP SOURCE_DIR: the report commands end to end on the fixtures in
# tests/report/data, then every report they wrote loaded in headless Chromium (Debian
# `chromium`, installed by scripts/setup.sh): no console message, no script error, every plot
# drawn. Exit 77 (skipped) only when chromium is missing. Set LLMTAP_REPORT_SCREENSHOT=FILE.png
# to keep a screenshot of the spec-decode run's report.
set -euo pipefail
llmtap=$(realpath "$1")
src=$(realpath "$2")
data="$src/tests/report/data"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "html_chromium_test: $*" >&2; exit 1; }

cp -r "$data/run_a" "$data/run_b" "$work/"

# report html re-renders a directory's report.
"$llmtap" report html "$work/run_a" >/dev/null
"$llmtap" report html "$work/run_b" -o "$work/run_b.html" >/dev/null
[[ -s "$work/run_a/report.html" && -s "$work/run_b.html" ]] || fail "report html wrote nothing"

# report merge: run_b split into two shards by index parity.
for i in 0 1; do
  mkdir -p "$work/shard$i"
  jq -c --argjson i "$i" 'select(.index % 2 == $i) | .shard = $i' "$work/run_b/requests.jsonl" \
    >"$work/shard$i/requests.jsonl"
  n=$(jq -s 'map(select(.warmup | not)) | length' "$work/shard$i/requests.jsonl")
  jq --argjson i "$i" --argjson n "$n" '.shard = {"index": $i, "count": 2} | .requests.scheduled = $n' \
    "$work/run_b/summary.json" >"$work/shard$i/summary.json"
done
"$llmtap" report merge "$work/shard0" "$work/shard1" -o "$work/merged" >"$work/merge.out" 2>&1 ||
  { cat "$work/merge.out" >&2; fail "report merge failed"; }
grep -q "^warning" "$work/merge.out" && { cat "$work/merge.out" >&2; fail "merge warned"; }
[[ $(wc -l <"$work/merged/requests.jsonl") -eq $(wc -l <"$work/run_b/requests.jsonl") ]] ||
  fail "merged requests.jsonl has the wrong number of lines"
for key in .metrics .requests .goodput; do
  [[ $(jq -c "$key" "$work/merged/summary.json") == $(jq -c "$key" "$work/run_b/summary.json") ]] ||
    fail "merged $key differs from the unsplit run's"
done

# compare: the table and its JSON.
"$llmtap" compare "$work/run_a" "$work/run_b/summary.json" --labels off,on >"$work/compare.txt"
grep -q "output token throughput" "$work/compare.txt" || fail "compare: no throughput row"
grep -q "on/off" "$work/compare.txt" || fail "compare: no ratio column"
"$llmtap" compare "$work/run_a" "$work/run_b" --json |
  jq -e '.rows[] | select(.key == "/throughput/requests_per_s") | .ratios[1] > 0' >/dev/null ||
  fail "compare --json: no throughput ratio"
if "$llmtap" compare "$work/run_a" "$work/nowhere" 2>/dev/null; then fail "compare accepted a missing run"; fi

chromium_bin=$(command -v chromium || command -v chromium-browser || true)
if [[ -z "$chromium_bin" ]]; then
  echo "html_chromium_test: SKIPPED, chromium is not installed (scripts/setup.sh installs it)"
  exit 77
fi

# Loads $1 in headless Chromium; the DOM goes to $2, the browser's log to $2.log.
load() {
  timeout 90 "$chromium_bin" --headless --disable-gpu --no-sandbox --no-first-run \
    --user-data-dir="$work/profile" --enable-logging=stderr --v=0 \
    --virtual-time-budget=5000 --dump-dom "file://$1" >"$2" 2>"$2.log" ||
    { cat "$2.log" >&2; fail "chromium failed on $1"; }
}

check() {  # check FILE MIN_PLOTS
  local dom="$work/dom.html"
  load "$1" "$dom"
  if grep -E "CONSOLE|Uncaught" "$dom.log" >&2; then fail "$1: console output (above)"; fi
  grep -q 'data-rendered="ok"' "$dom" || fail "$1: the report's script did not finish"
  if grep -o 'data-errors="[^"]*"' "$dom" >&2; then fail "$1: script errors (above)"; fi
  local plots
  plots=$(grep -o '<svg[^>]*class="plot"' "$dom" | wc -l)
  [[ $plots -ge $2 ]] || fail "$1: $plots plots drawn, expected at least $2"
  grep -q "data-plots=\"$plots\"" "$dom" || fail "$1: data-plots does not match the SVGs"
  # Each plot has drawn marks, not only axes.
  for id in plot-rate plot-ttft plot-itl plot-latency plot-lag-time plot-lag-cdf; do
    grep -q "data-plot=\"$id\"" "$dom" || fail "$1: no $id"
  done
  [[ $(grep -o '<rect ' "$dom" | wc -l) -gt 10 ]] || fail "$1: histograms have no bars"
  [[ $(grep -o '<circle ' "$dom" | wc -l) -gt 10 ]] || fail "$1: the lag plot has no points"
  echo "ok $1: $plots plots"
}
check "$work/run_a/report.html" 6
check "$work/run_b.html" 9  # + server load, acceptance over time, acceptance by position
check "$work/merged/report.html" 9

# What the server reported per request (cached tokens, speculation): run_b's requests with a
# server report added, re-rendered: the two scatter plots of the server's figures against the
# client's timings are drawn, and the cache table shows the replay and the capture.
mkdir -p "$work/run_s"
jq -c 'if .input_tokens then .cached_tokens = ((.input_tokens * (.index % 4)) / 4 | floor)
         | .spec = {"engine": "llamacpp", "num_draft_tokens": 8,
                    "num_accepted_draft_tokens": (.index % 9)} else . end' \
  "$work/run_b/requests.jsonl" >"$work/run_s/requests.jsonl"
jq '.server = {"cache": {"requests": 10, "prompt_tokens": 1000, "cached_tokens": 400,
                         "hit_rate": 0.4}, "spec": null}
    | .captured_server = {"cache": {"requests": 10, "prompt_tokens": 1000, "cached_tokens": 500,
                                    "hit_rate": 0.5}}' \
  "$work/run_b/summary.json" >"$work/run_s/summary.json"
"$llmtap" report html "$work/run_s" >/dev/null
grep -q '<td>capture</td><td>10</td><td>1000</td><td>500</td><td>0.5000</td>' \
  "$work/run_s/report.html" || fail "run_s: no capture row in the server cache table"
check "$work/run_s/report.html" 11
for id in plot-cache-ttft plot-spec-itl; do
  grep -q "data-plot=\"$id\"" "$work/dom.html" || fail "run_s: no $id"
done

# The replay-fidelity certificate (summary.json "fidelity"): run_b with the sample document
# (tests/report/data/fidelity.json, a hostile floor label), re-rendered: its section is in the
# DOM, one table of verdicts per group, the page's script still finishes; compare reads it.
mkdir -p "$work/run_f"
cp "$work/run_b/requests.jsonl" "$work/run_f/"
jq --slurpfile f "$data/fidelity.json" \
  '.fidelity = ($f[0] | .floor.label = "<script>alert(1)</script>")' \
  "$work/run_b/summary.json" >"$work/run_f/summary.json"
"$llmtap" report html "$work/run_f" >/dev/null
check "$work/run_f/report.html" 9
grep -q '<section id="fidelity">' "$work/dom.html" || fail "run_f: no fidelity section in the DOM"
for id in fidelity-0-metrics fidelity-1-metrics fidelity-0-timing fidelity-0-server; do
  grep -q "id=\"$id\"" "$work/dom.html" || fail "run_f: no $id"
done
grep -q '<td class="verdict v-bad">not reproduced</td>' "$work/dom.html" ||
  fail "run_f: no styled verdict"
[[ $(grep -o '<script' "$work/dom.html" | wc -l) -eq 2 ]] || fail "run_f: the hostile label ran"
"$llmtap" report html "$work/run_b" -o "$work/run_b_again.html" >/dev/null
if grep -q 'id="fidelity"' "$work/run_b_again.html"; then fail "run_b: a fidelity section"; fi
"$llmtap" compare "$work/run_a" "$work/run_f" --json |
  jq -e '[.rows[] | select(.key == "/fidelity/certified" or .key == "/fidelity/reproduced")
          | .values] == [[null, 0], [null, 8]]' >/dev/null || fail "compare: no fidelity rows"

# llmtap specdec --html: a capture whose outcomes hold the responses (capture_responses), two
# system prompts, both methods swept over k: per group a table and two plots.
for i in $(seq 1 12); do
  sys=$([[ $((i % 2)) -eq 0 ]] && echo "Edit the code." || echo "Chat freely.")
  text="def f$((i % 3))(x): return x + $((i % 3)) # the same function again and again"
  printf '{"timestamp":%d,"payload":{"model":"m","messages":[{"role":"system","content":"%s"},{"role":"user","content":"%s"}]}}\n' \
    "$((i * 10))" "$sys" "$text $text" >>"$work/sd.jsonl"
  printf '{"line":%d,"timestamp":%d,"status":200,"finish_reason":"stop","cancelled":false,"error":null,"response":{"text":"%s","reasoning":"","tool_calls":[],"truncated":false}}\n' \
    "$i" "$((i * 10))" "$text" >>"$work/sd.jsonl.outcomes.ndjson"
done
"$llmtap" specdec "$work/sd.jsonl" --tokenizer builtin --method ngram,suffix --ngram-min 1,2 \
  --ngram-max 3 --by system-prompt --html "$work/specdec.html" >"$work/specdec.txt" ||
  { cat "$work/specdec.txt" >&2; fail "specdec --html failed"; }
load "$work/specdec.html" "$work/sd.dom"
if grep -E "CONSOLE|Uncaught" "$work/sd.dom.log" >&2; then fail "specdec.html: console output"; fi
grep -q 'data-rendered="ok"' "$work/sd.dom" || fail "specdec.html: the script did not finish"
[[ $(grep -o '<svg[^>]*class="plot"' "$work/sd.dom" | wc -l) -eq 6 ]] ||
  fail "specdec.html: expected 6 plots (2 per group: all and two system prompts)"
grep -q 'data-plots="6"' "$work/sd.dom" || fail "specdec.html: data-plots does not match"
[[ $(grep -o '<path d="M' "$work/sd.dom" | wc -l) -ge 18 ]] ||
  fail "specdec.html: a line per method and n-gram range in every plot"
echo "ok $work/specdec.html: 6 plots"

# llmtap shadow report --html: 200 pairs (a candidate with a longer TTFT), per plotted metric a
# delta-over-time plot (points) and a histogram (bars).
for i in $(seq 0 199); do
  printf '{"request":%d,"shadow":0,"candidate_url":"http://candidate:8000","path":"/v1/chat/completions","model":"m","temperature":0,"at_ms":%d,"primary":{"status":200,"ttft_ms":%d.5,"itl_p50_ms":5,"latency_ms":%d,"completion_tokens":20,"error":null},"candidate":{"status":200,"ttft_ms":%d.25,"itl_p50_ms":6,"latency_ms":%d,"completion_tokens":20,"error":null},"output":{"equal":true}}\n' \
    "$i" "$((1765065600000 + i * 37))" "$((40 + i % 17))" "$((140 + i % 23))" "$((52 + i % 19))" \
    "$((155 + i % 29))" >>"$work/pairs.ndjson"
done
"$llmtap" shadow report "$work/pairs.ndjson" --html "$work/shadow.html" >"$work/shadow.txt" ||
  { cat "$work/shadow.txt" >&2; fail "shadow report --html failed"; }
load "$work/shadow.html" "$work/sh.dom"
if grep -E "CONSOLE|Uncaught" "$work/sh.dom.log" >&2; then fail "shadow.html: console output"; fi
grep -q 'data-rendered="ok"' "$work/sh.dom" || fail "shadow.html: the script did not finish"
grep -q 'data-plots="6"' "$work/sh.dom" || fail "shadow.html: expected 6 plots (TTFT, latency, ITL)"
[[ $(grep -o '<circle ' "$work/sh.dom" | wc -l) -ge 600 ]] || fail "shadow.html: deltas over time"
[[ $(grep -o '<rect ' "$work/sh.dom" | wc -l) -ge 15 ]] || fail "shadow.html: histograms have no bars"
grep -q 'paired bootstrap (2000 resamples of the pairs, seed 1)' "$work/sh.dom" ||
  fail "shadow.html: the method line lacks the resample count"
grep -q '<h2>Shadow 0 (candidate): http://candidate:8000</h2>' "$work/sh.dom" ||
  fail "shadow.html: the heading does not name the candidate"
echo "ok $work/shadow.html: 6 plots"

if [[ -n "${LLMTAP_REPORT_SCREENSHOT:-}" ]]; then
  timeout 90 "$chromium_bin" --headless --disable-gpu --no-sandbox --no-first-run \
    --user-data-dir="$work/profile" --hide-scrollbars --window-size=1280,3800 \
    --virtual-time-budget=5000 --screenshot="$LLMTAP_REPORT_SCREENSHOT" "file://$work/run_b.html" \
    >/dev/null 2>&1
  echo "screenshot: $LLMTAP_REPORT_SCREENSHOT"
fi
echo "html_chromium_test: all passed"
