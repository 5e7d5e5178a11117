#!/usr/bin/env bash
# shadow_report.sh [BUILD_DIR] [PAIRS] [ROUNDS]: `llmtap shadow report` over PAIRS synthetic pair
# lines (default 100,000: TTFT lognormal around 50 ms, the candidate 5 % slower, two paths, two
# models: five groups of 4 metrics), --json and --html, ROUNDS rounds (default 3); the peer is
# jq reading the same file for one mean. Checks the verdict (TTFT worse) and that two runs with
# the same seed write the same JSON. Prints wall and user seconds per round.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
n=${2:-100000}
rounds=${3:-3}
llmtap=$build/llmtap
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$n" >"$work/pairs.ndjson" <<'PY'
import json, math, random, sys
r = random.Random(5)
for i in range(int(sys.argv[1])):
    base = math.exp(r.gauss(math.log(50), 0.3))
    tok = r.randint(20, 200)
    def side(factor):
        t = base * factor * math.exp(r.gauss(0, 0.1))
        itl = 10 * math.exp(r.gauss(0, 0.03))
        return {"status": 200, "ttft_ms": round(t, 3), "itl_p50_ms": round(itl, 3),
                "itl_max_ms": round(3 * itl, 3), "latency_ms": round(t + itl * tok, 3),
                "prompt_tokens": 57, "completion_tokens": tok, "finish_reason": "stop",
                "error": None}
    p, c = side(1), side(1.05)
    print(json.dumps({"line": i + 1, "timestamp": i * 10, "request": i, "shadow": 0,
                      "path": "/v1/completions" if i % 4 == 0 else "/v1/chat/completions",
                      "model": "m2" if i % 3 == 0 else "m1", "temperature": 0,
                      "at_ms": 1765065600000 + i * 10, "primary": p, "candidate": c,
                      "delta": {"ttft_ms": round(c["ttft_ms"] - p["ttft_ms"], 3),
                                "itl_p50_ms": round(c["itl_p50_ms"] - p["itl_p50_ms"], 3),
                                "latency_ms": round(c["latency_ms"] - p["latency_ms"], 3)},
                      "output": {"equal": True, "first_diff_char": None, "first_diff_token": None,
                                 "length_ratio": 1.0, "truncated": False}},
                     separators=(",", ":")))
PY
echo "pairs: $n ($(du -h "$work/pairs.ndjson" | cut -f1)), load $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq 1 "$rounds"); do
  /usr/bin/time -f "round $round: llmtap shadow report %e s wall, %U s user, %M KB max RSS" \
    "$llmtap" shadow report "$work/pairs.ndjson" --json "$work/r$round.json" \
    --html "$work/r$round.html" >/dev/null
  /usr/bin/time -f "round $round: jq (one mean, the peer) %e s wall, %U s user" \
    jq -n '[inputs.candidate.ttft_ms] | add / length' "$work/pairs.ndjson" >/dev/null
done
jq -e '.shadows[0].groups[0].metrics.ttft_ms.verdict == "worse"' "$work/r1.json" >/dev/null ||
  { echo "shadow_report.sh: the TTFT verdict is not worse" >&2; exit 1; }
cmp -s <(jq -S 'del(.inputs.files)' "$work/r1.json") <(jq -S 'del(.inputs.files)' "$work/r$rounds.json") ||
  { echo "shadow_report.sh: the same seed gave another JSON" >&2; exit 1; }
echo "ok: TTFT worse, ratio $(jq '.shadows[0].groups[0].metrics.ttft_ms.ratio' "$work/r1.json"), CI $(jq -c '.shadows[0].groups[0].metrics.ttft_ms.ci' "$work/r1.json"); same JSON every round"
