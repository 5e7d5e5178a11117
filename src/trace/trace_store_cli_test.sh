#!/usr/bin/env bash
# trace_store_cli_test.sh LLMTAP SOURCE_DIR: every trace tool (validate, stats, split, convert,
# merge, anonymize, replay) gives on s3:// input and on .zst input (local and in the store) what
# it gives on the local uncompressed file, and -o s3://... and -o x.jsonl.zst hold what a local
# -o holds; then `merge` of a store prefix. Runs under tests/lib/with_rgw.sh (AWS_*,
# LLMTAP_TEST_BUCKET); needs curl and python3, as rgw.sh does.
set -uo pipefail
source "$2/tests/lib/cli_test.sh"
bucket=${LLMTAP_TEST_BUCKET:?run under tests/lib/with_rgw.sh}
store=s3://$bucket/trace-cli
sim_pid='' proxy_pid=''
stop() {  # stop PID...: by PID only, then reap it
  local p
  for p in "$@"; do [[ -n $p ]] && kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  return 0
}
trap 'stop "$proxy_pid" "$sim_pid"; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
same() {  # same FILE_A FILE_B WHAT
  cmp -s "$1" "$2" || { fail "$3 differs"; diff "$1" "$2" | head -20; }
}

# S3 by hand (curl's SigV4), to put inputs in place and fetch outputs byte for byte.
s3curl() {
  curl -sf --aws-sigv4 "aws:amz:${AWS_REGION}:s3" \
    --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$@"
}
s3put() { s3curl -T "$1" "$AWS_ENDPOINT_URL_S3/$bucket/${2#s3://"$bucket"/}" >/dev/null || fail "PUT $2"; }
s3get() { s3curl -o "$2" "$AWS_ENDPOINT_URL_S3/$bucket/${1#s3://"$bucket"/}" || fail "GET $1"; }

# Helpers in Python, called in batches (python3 starts slowly on a busy machine):
#   input FILE                      a small capture (chat and completions, streamed or not,
#                                   timestamps 0..230 ms) and its manifest
#   zst c|d IN OUT [IN OUT...]      zstd through libzstd (the library llmtap links; the zstd
#                                   program may not be installed)
#   segment-manifest DATA KEY OUT   the manifest the uploader would write for DATA at KEY
#   merge-manifest FILE IN [...]    FILE.norm: a merge manifest without its paths (merged_from
#                                   must be [IN])
#   replay DIR [...]                DIR/replay.norm: what a replay did that is deterministic
cat >"$tmp/h.py" <<'EOF'
import ctypes, hashlib, json, sys

def make_input(path):
    rows = []
    for i in range(24):
        if i % 3 == 2:
            body = {"model": "m", "prompt": "Count to %d: %s" % (i, "one two " * (i % 5)),
                    "max_tokens": 3}
        else:
            body = {"model": "m", "messages": [{"role": "system", "content": "Be terse."},
                    {"role": "user", "content": "Question %d %s" % (i, "why " * i)}],
                    "max_tokens": 3, "stream": i % 2 == 0}
        rows.append(json.dumps({"timestamp": i * 10, "payload": body}, separators=(",", ":")))
    open(path, "w").write("\n".join(rows) + "\n")
    json.dump({"schema": "llmtap.capture.manifest/v1", "format": "mooncake_payload",
               "config": {"sample_rate": 1.0}, "timestamp_zero_unix_ms": 1796378400000,
               "host": "h", "pid": 7, "started_utc": "2026-12-04T09:59:59.000Z",
               "state": "stopped",
               "file": {"sequence": 1, "records": 24, "bytes": 0, "last_timestamp_ms": 230},
               "counters": {"matched": 24, "recorded": 24}},
              open(path + ".manifest.json", "w"))

def zst(mode, pairs):
    z = ctypes.CDLL("libzstd.so.1")
    S = ctypes.c_size_t
    for f in ("ZSTD_compressBound", "ZSTD_compress", "ZSTD_decompressStream",
              "ZSTD_DStreamOutSize"):
        getattr(z, f).restype = S
    z.ZSTD_isError.restype = ctypes.c_uint
    z.ZSTD_createDStream.restype = ctypes.c_void_p
    class Buf(ctypes.Structure):
        _fields_ = [("ptr", ctypes.c_void_p), ("size", S), ("pos", S)]
    for src, dst in zip(pairs[::2], pairs[1::2]):
        data = open(src, "rb").read()
        if mode == "c":
            cap = z.ZSTD_compressBound(S(len(data)))
            out = ctypes.create_string_buffer(cap)
            n = z.ZSTD_compress(out, S(cap), data, S(len(data)), 3)
            assert not z.ZSTD_isError(S(n))
            open(dst, "wb").write(out.raw[:n])
            continue
        ds = ctypes.c_void_p(z.ZSTD_createDStream())
        src_buf = ctypes.create_string_buffer(data, len(data))
        inb = Buf(ctypes.cast(src_buf, ctypes.c_void_p), len(data), 0)
        cap = z.ZSTD_DStreamOutSize()
        out = ctypes.create_string_buffer(cap)
        res = bytearray()
        while True:
            ob = Buf(ctypes.cast(out, ctypes.c_void_p), cap, 0)
            r = z.ZSTD_decompressStream(ds, ctypes.byref(ob), ctypes.byref(inb))
            assert not z.ZSTD_isError(S(r)), src + ": corrupt zstd"
            res += out.raw[:ob.pos]
            if inb.pos == inb.size and ob.pos < cap:
                break
        open(dst, "wb").write(bytes(res))

def segment_manifest(plain, data_path, key, out):
    m = json.load(open(plain + ".manifest.json"))
    data = open(data_path, "rb").read()
    m.update(replica="gpu-a", records=24, uploaded_utc="2026-12-04T12:00:00.000Z",
             objects=[{"role": "data", "key": key, "bytes": len(data),
                       "sha256": hashlib.sha256(data).hexdigest()}])
    json.dump(m, open(out, "w"))

def merge_manifest(args):
    for path, src in zip(args[::2], args[1::2]):
        m = json.load(open(path))
        assert m["merged_from"] == [src], m["merged_from"]
        for k in ("capture_path", "merged_from"):
            m.pop(k)
        json.dump(m, open(path + ".norm", "w"), indent=1)

def replay(dirs):
    # Which rows were sent where and when, the answers' token counts (the sim is seeded), and
    # the bodies the capturing proxy recorded.
    keep = ("index", "endpoint", "scheduled_ms", "status", "stream", "error", "output_tokens")
    for d in dirs:
        rows = [json.loads(l) for l in open(d + "/replay/requests.jsonl")]
        rows = sorted([{k: r.get(k) for k in keep} for r in rows], key=lambda r: r["index"])
        sent = sorted(json.dumps(json.loads(l)["payload"], sort_keys=True)
                      for l in open(d + "/sent.jsonl"))
        assert len(rows) == 24 and len(sent) == 24, (d, len(rows), len(sent))
        json.dump({"requests": rows, "sent": sent}, open(d + "/replay.norm", "w"), indent=1)

cmd, args = sys.argv[1], sys.argv[2:]
if cmd == "input":
    make_input(*args)
elif cmd == "zst":
    zst(args[0], args[1:])
elif cmd == "segment-manifest":
    segment_manifest(*args)
elif cmd == "merge-manifest":
    merge_manifest(args)
elif cmd == "replay":
    replay(args)
EOF
h() { python3 "$tmp/h.py" "$@" || fail "h.py $1"; }

# normalize FILE IN: a run's stdout with the input's name (and its manifest's, and the names
# derived from a .zst input) made generic, so that runs on different inputs compare.
normalize() {
  local text
  text=$(<"$1")
  text=${text//"${2%.zst}.manifest.json"/IN.manifest.json}
  text=${text//"$2"/IN}
  text=${text//requests.jsonl.zst./requests.}
  printf '%s\n' "$text" | sed -E 's#split_[a-z0-9_]+#split_X#g' >"$1.norm"
}

# --- the input, and its .zst, on disk and in the store (the manifest beside each) ------------
mkdir -p "$tmp/in"
plain=$tmp/in/requests.jsonl
h input "$plain"
h zst c "$plain" "$plain.zst"
for f in requests.jsonl requests.jsonl.zst requests.jsonl.manifest.json; do
  s3put "$tmp/in/$f" "$store/in/$f"
done
declare -A input=([local]=$plain [local_zst]=$plain.zst [s3]=$store/in/requests.jsonl
                  [s3_zst]=$store/in/requests.jsonl.zst)
variants=(local local_zst s3 s3_zst)

# --- validate, stats, split, convert, merge, anonymize: each output equals the local run's ---
manifests=()
for v in "${variants[@]}"; do
  in=${input[$v]}
  d=$tmp/$v
  mkdir -p "$d"
  expect 0 "validate $v" -- "$llmtap" validate "$in"
  cp "$tmp/out" "$d/validate"
  expect 0 "validate --json $v" -- "$llmtap" validate --json "$in"
  cp "$tmp/out" "$d/validate_json"
  expect 0 "stats $v" -- "$llmtap" stats "$in"
  cp "$tmp/out" "$d/stats"
  expect 0 "stats --json $v" -- "$llmtap" stats --json "$in"
  cp "$tmp/out" "$d/stats_json"
  expect 0 "split $v" -- "$llmtap" split "$in" --out-dir "$tmp/split_$v"
  cp "$tmp/out" "$d/split"
  for e in chat completions; do
    cat "$tmp/split_$v"/*."$e".jsonl >"$d/split.$e" 2>/dev/null || fail "split $v: no $e output"
  done
  # Chat rows only (AIPerf's raw_payload takes no completions): the completions rows are named.
  expect 1 "convert $v" -- "$llmtap" convert "$in" --to raw_payload -o "$d/convert.jsonl"
  expect 0 "merge $v" -- "$llmtap" merge "$in" -o "$d/merge.jsonl"
  manifests+=("$d/merge.jsonl.manifest.json" "$in")
  expect 0 "anonymize $v" -- "$llmtap" anonymize "$in" --tokenizer builtin -o "$d/anon.jsonl"
  for f in validate validate_json stats stats_json split; do normalize "$d/$f" "$in"; done
done
h merge-manifest "${manifests[@]}"
for v in local_zst s3 s3_zst; do
  for f in validate.norm validate_json.norm stats.norm stats_json.norm split.norm split.chat \
           split.completions convert.jsonl merge.jsonl merge.jsonl.manifest.json.norm anon.jsonl; do
    same "$tmp/local/$f" "$tmp/$v/$f" "$v: $f"
  done
done
[[ $(wc -l <"$tmp/local/merge.jsonl") == 24 ]] || fail "merge: want 24 rows"
same "$plain" "$tmp/local/merge.jsonl" "merge of one capture from timestamp 0 (should be itself)"

# --- outputs: -o x.jsonl.zst and -o s3://... (plain and .zst) hold the local output --------
declare -A want=([convert]=$tmp/local/convert.jsonl [merge]=$tmp/local/merge.jsonl
                 [anonymize]=$tmp/local/anon.jsonl)
unz=()
for tool in convert merge anonymize; do
  code=0
  case $tool in
    convert) args=(convert "$plain" --to raw_payload) code=1 ;;  # completions rows named
    merge) args=(merge "$plain") ;;
    anonymize) args=(anonymize "$plain" --tokenizer builtin) ;;
  esac
  expect "$code" "$tool -o .zst" -- "$llmtap" "${args[@]}" -o "$tmp/out_$tool.jsonl.zst"
  expect "$code" "$tool -o s3://" -- "$llmtap" "${args[@]}" -o "$store/out/$tool.jsonl"
  s3get "$store/out/$tool.jsonl" "$tmp/s3_$tool.jsonl"
  same "${want[$tool]}" "$tmp/s3_$tool.jsonl" "$tool -o s3://"
  expect "$code" "$tool -o s3://...zst" -- "$llmtap" "${args[@]}" -o "$store/out/${tool}_z.jsonl.zst"
  s3get "$store/out/${tool}_z.jsonl.zst" "$tmp/s3_$tool.jsonl.zst"
  unz+=("$tmp/out_$tool.jsonl.zst" "$tmp/out_$tool.unz" "$tmp/s3_$tool.jsonl.zst" "$tmp/s3_$tool.unz")
  expect 2 "$tool -o s3:// again refuses" -- "$llmtap" "${args[@]}" -o "$store/out/$tool.jsonl"
  contains "$tmp/err" "--force"
done
h zst d "${unz[@]}"
for tool in convert merge anonymize; do
  same "${want[$tool]}" "$tmp/out_$tool.unz" "$tool -o x.jsonl.zst"
  same "${want[$tool]}" "$tmp/s3_$tool.unz" "$tool -o s3://...zst"
done
# A merged output's manifest goes beside it, named after the uncompressed name.
s3get "$store/out/merge_z.jsonl.manifest.json" "$tmp/s3_merge.manifest.json"
grep -q '"records": 24' "$tmp/s3_merge.manifest.json" || fail "merge -o s3://...zst: manifest"
expect 0 "split --out-dir s3://" -- "$llmtap" split "$plain" --out-dir "$store/split/"
s3get "$store/split/requests.chat.jsonl" "$tmp/s3_split.chat"
same "$tmp/local/split.chat" "$tmp/s3_split.chat" "split --out-dir s3://"

# --- merge of a store prefix: segments as the uploader leaves them --------------------------
seg=$store/fleet/gpu-a/requests.20261204T100000.000Z.jsonl.zst
s3put "$plain.zst" "$seg"
h segment-manifest "$plain" "$plain.zst" "${seg#s3://"$bucket"/}" "$tmp/seg.manifest.json"
s3put "$tmp/seg.manifest.json" "${seg%.zst}.manifest.json"
s3put "$plain" "$store/fleet/gpu-b/requests.20261204T100001.000Z.jsonl"  # no manifest yet
expect 1 "merge s3:// prefix" -- "$llmtap" merge "$store/fleet/" -o "$tmp/fleet.jsonl"
contains "$tmp/out" "segment $store/fleet/gpu-b/requests.20261204T100001.000Z.jsonl: no manifest"
same "$tmp/local/merge.jsonl" "$tmp/fleet.jsonl" "merge s3:// prefix"
expect 0 "merge --replica" -- "$llmtap" merge "$store/fleet/" --replica 'gpu-a*' -o "$tmp/fleet_a.jsonl"
contains "$tmp/out" "--replica left out: gpu-b"
expect 0 "merge --from/--to" -- "$llmtap" merge "$store/fleet/" --replica gpu-a \
  --from 2026-12-04T10:00:00.050Z --to 1796378400100 -o "$tmp/fleet_w.jsonl"
[[ $(wc -l <"$tmp/fleet_w.jsonl") == 5 ]] || fail "merge --from/--to: want 5 rows (50..90 ms)"
expect 2 "merge --from in seconds" -- "$llmtap" merge "$store/fleet/" --from 1796378400 -o "$tmp/x.jsonl"
contains "$tmp/err" "looks like Unix seconds"
expect 2 "merge of an empty prefix" -- "$llmtap" merge "$store/nothing/" -o "$tmp/y.jsonl"
contains "$tmp/err" "no complete segment under $store/nothing/"
expect 2 "merge without credentials" -- env -u AWS_ACCESS_KEY_ID "$llmtap" merge "$store/fleet/" -o "$tmp/z.jsonl"
contains "$tmp/err" "AWS_ACCESS_KEY_ID"
expect 2 "merge from a missing bucket" -- "$llmtap" merge "s3://no-such-bucket-llmtap/fleet/" -o "$tmp/z.jsonl"
contains "$tmp/err" "bucket"
expect 0 "merge --help" -- "$llmtap" merge --help
contains "$tmp/out" "--replica"
contains "$tmp/out" "without a manifest"

# --- replay: through a capturing proxy in front of the sim, so the bodies sent are recorded ---
start() {  # start NAME ARGS...: runs llmtap ARGS in the background; sets $pid and $addr
  : >"$tmp/$1.log"  # before the job starts: the job opens it itself, maybe after the first read
  "$llmtap" "${@:2}" >"$tmp/$1.log" 2>&1 &
  pid=$!
  addr=''
  for _ in $(seq 600); do  # up to 30 s: a sanitizer build starting on a loaded machine
    addr=$(sed -n 's#.*listening on \(http://127\.0\.0\.1:[0-9]*\).*#\1#p' "$tmp/$1.log")
    [[ -n $addr ]] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  [[ -n $addr ]] || { fail "$1 did not start"; cat "$tmp/$1.log"; }
}
start sim sim --listen 127.0.0.1:0 --served-model-name m --ttft-ms 1 --itl-ms 1 --itl-jitter-ms 0
sim_pid=$pid sim_url=$addr
for v in "${variants[@]}"; do
  start "proxy_$v" proxy --listen 127.0.0.1:0 --upstream "$sim_url" --capture \
    --capture-path "$tmp/$v/sent.jsonl"
  proxy_pid=$pid
  expect 0 "replay $v" -- "$llmtap" replay "${input[$v]}" --url "$addr" --server-metrics off \
    --out "$tmp/$v/replay"
  stop "$proxy_pid"  # drains the capture
  proxy_pid=''
done
stop "$sim_pid"
sim_pid=''
h replay "$tmp/local" "$tmp/local_zst" "$tmp/s3" "$tmp/s3_zst"
for v in local_zst s3 s3_zst; do same "$tmp/local/replay.norm" "$tmp/$v/replay.norm" "replay $v"; done

if ((fails)); then echo "$fails failures"; exit 1; fi
echo "trace store CLI: all checks pass"
