#!/usr/bin/env bash
# specdec_engine.sh [BUILD_DIR]: `llmtap specdec`'s llama.cpp n-gram estimates against
# llama-server's own speculative decoding (issue 47), on the bundle's cycle model.
#   1. tests/node/engine_specdec.test.mjs as the suite runs it (--parallel 1: ngram-simple n3/m8
#      and n2/m16, ngram-map-k n3/m8; 104 completions each): requests predicted exactly, the
#      aggregate acceptance predicted and the server's;
#   2. the same with --parallel 4 and 4 clients (batched; map state per slot): measured, not
#      asserted;
#   3. the decode speed the speculation bought: each --parallel 1 capture replayed (llmtap replay,
#      one request at a time: --concurrency 1) to a fresh one-slot server with that --spec-type
#      and to one without, the server's own decode tokens/s (sum of timings.predicted_n over sum
#      of predicted_ms) on each, beside specdec's estimated speedup (its default cost model).
# Prints one block per part; the captures and runs stay under $TMPDIR/specdec-engine.
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
root=${TMPDIR:-/tmp}/specdec-engine
rm -rf "$root"
mkdir -p "$root/p1" "$root/p4"
llama=tests/engine/llamacpp.sh
work=$(bash $llama work)
export LLMTAP_BIN=$build/llmtap

echo "== 1. --parallel 1"
SPECDEC_KEEP=$root/p1 node --test --test-reporter=spec tests/node/engine_specdec.test.mjs 2>&1 | grep -E '(simple|map-k)-n|^. (pass|fail)' || true
echo "== 2. --parallel 4, 4 clients"
SPECDEC_KEEP=$root/p4 SPECDEC_PARALLEL=4 node --test --test-reporter=spec tests/node/engine_specdec.test.mjs 2>&1 | grep -E '(simple|map-k)-n|^. (pass|fail)' || true

echo "== 2b. greedy outputs under batching: --parallel 4 against --parallel 1, by prompt"
for name in simple-n3-m8 simple-n2-m16 map-k-n3-m8; do
  python3 - "$root/p1/$name.jsonl" "$root/p4/$name.jsonl" "$name" <<'PY'
import json, sys
def outputs(capture):
    rows = [json.loads(l) for l in open(capture)]
    outs = {json.loads(l)["line"]: json.loads(l) for l in open(capture + ".outcomes.ndjson")}
    return {r["payload"]["prompt"]: (outs[i + 1].get("response") or {}).get("text") for i, r in enumerate(rows)}
a, b = outputs(sys.argv[1]), outputs(sys.argv[2])
same = sum(1 for k in a if k in b and a[k] == b[k])
print(f"{sys.argv[3]}: {same} of {len(a)} outputs equal with 4 slots ({len(a) - same} changed)")
PY
done

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# decode NAME CAPTURE FLAGS...: replays CAPTURE to a fresh cycle-model server started with FLAGS;
# prints its decode tokens/s from the replay's requests.jsonl.
decode() {
  local name=$1 capture=$2 port
  shift 2
  port=$(free_port)
  LLAMA_MODEL=$work/model/tiny-llama-cycle.gguf LLAMA_ALIAS=tiny-llama-cycle \
    bash $llama start "$port" --parallel 1 "$@" >/dev/null
  "$build/llmtap" replay "$capture" --url "http://127.0.0.1:$port" --concurrency 1 \
    --out "$root/$name" --server-metrics off --no-fidelity >/dev/null
  bash $llama stop "$port" >/dev/null
  python3 - "$root/$name/requests.jsonl" <<'PY'
import json, sys
n = ms = 0
for line in open(sys.argv[1]):
    s = json.loads(line).get("server") or {}
    if s.get("decode_n") and s.get("decode_ms"):
        n += s["decode_n"]; ms += s["decode_ms"]
print(f"{1000 * n / ms:.1f}")
PY
}
echo "== 3. decode tokens/s with the speculation on and off (same requests), and specdec's estimate"
for setting in "simple-n3-m8 ngram-simple 3 8" "simple-n2-m16 ngram-simple 2 16" "map-k-n3-m8 ngram-map-k 3 8"; do
  read -r name type n m <<<"$setting"
  capture=$root/p1/$name.jsonl
  on=$(decode "$name-on" "$capture" --spec-type "$type" "--spec-$type-size-n" "$n" "--spec-$type-size-m" "$m")
  off=$(decode "$name-off" "$capture")
  est=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.2f" % d["total"]["points"][0]["speedup"])' "$root/p1/$name.json")
  python3 -c "import sys; on, off = float(sys.argv[2]), float(sys.argv[3]); print(f'{sys.argv[1]}: decode {on:.1f} tok/s with, {off:.1f} without: measured {on/off:.2f}x; specdec estimate {sys.argv[4]}x')" "$name" "$on" "$off" "$est"
done
