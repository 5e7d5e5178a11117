#!/usr/bin/env bash
# merge_vs_curl.sh [BUILD_DIR] [MIB] [ROUNDS]: `llmtap merge s3://bucket/prefix/` against `curl`
# GETs of the same objects from the same local Ceph RGW, side by side in one run, and against
# `llmtap merge` of the same segments from local disk.
#
# The store is laid out as the capture's uploader lays it out: 3 replicas (gpu-a, gpu-b, gpu-c,
# their times interleaved) of SEGMENTS (default 3) rotated segments each, every segment a
# bench/trace_gen capture of MIB MiB (default 128; gpu-c's are multi-turn conversations, the
# others mixed traffic), each with its manifest (epoch, file.last_timestamp_ms, records, the
# object's size and SHA-256) uploaded last. Two layouts of the same rows: "plain" (.jsonl) and
# "zstd" (.jsonl.zst, level 3 with a 16 MiB long-distance window, as the uploader compresses).
#
# Each round times, per layout, in alternating order (reversed in even rounds, so drift in the
# machine's speed hits all alike):
#   curl-seq  one curl process GETting every data object in key order over one connection;
#   curl-par  the same objects, 3 transfers at once (--parallel-max 3): merge reads the three
#             replicas' segments at the same time (one stream per replica), so this is the
#             download with merge's concurrency;
#   merge-s3  llmtap merge s3://bench/LAYOUT/ -o OUT: merge needs a file to write (and writes
#             OUT.manifest.json beside it), so OUT is on /dev/shm, removed before each run;
#   merge-local  llmtap merge of the same files on local disk (in the page cache) to the same
#             OUT: the ceiling a store read can approach.
# Before the rounds, each layout's store merge is checked to give the local merge's bytes and
# every row.
# Throughput is stored bytes (the objects as stored: compressed for zstd) per second. Prints each
# round, then per layout the medians and merge-s3 / curl (the faster of curl-seq and curl-par)
# and merge-s3 / merge-local.
#
# Environment: SEGMENTS (per replica, default 3), LAYOUTS (default "plain zstd"),
# RGW_MEMSTORE_BYTES (default 8 GiB), KEEP=1 keeps the generated files in BUILD_DIR/bench-tmp,
# BASELINE=/path/to/another/llmtap adds merge-s3-base: that binary's store merge in the same
# rounds (an earlier build, for before/after). STORE_CPU=N CLIENT_CPU=M pin the store to CPU N
# and curl and llmtap to CPU M (the store as on other machines).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
mib=${2:-128}
rounds=${3:-5}
segments=${SEGMENTS:-3}
layouts=${LAYOUTS:-plain zstd}
bench=merge_vs_curl
llmtap=$build/llmtap
gen=$build/bench/trace_gen
for tool in "$llmtap" "$gen"; do
  [[ -x $tool ]] || { echo "$bench: $tool missing; build it first" >&2; exit 2; }
done
command -v zstd >/dev/null || { echo "$bench: needs the zstd command (apt-get install zstd)" >&2; exit 2; }
replicas=(gpu-a gpu-b gpu-c)
tmp=$build/bench-tmp/$bench
out=/dev/shm/llmtap-$bench.$$
[[ -d /dev/shm ]] || out=$tmp/out
rgw=$(mktemp -d /tmp/llmtap-rgw.XXXXXX)
cleanup() {
  tests/lib/rgw.sh stop "$rgw" >/dev/null 2>&1 || true
  rm -rf "$rgw" "$out"
  [[ ${KEEP:-0} == 1 ]] || rm -rf "$tmp"
}
trap cleanup EXIT
rm -rf "$tmp"
mkdir -p "$tmp/gen" "$out"
# A copy, so that a rebuild while the benchmark runs does not pull the binary from under it.
cp "$llmtap" "$tmp/llmtap"
llmtap=$tmp/llmtap
baseline=
if [[ -n ${BASELINE:-} ]]; then
  cp "$BASELINE" "$tmp/llmtap-base"
  baseline=$tmp/llmtap-base
fi

# Segments: trace_gen captures, placed one after another per replica (1 s apart) from
# 2026-12-04T10:00:00Z, the replicas a few ms apart so their rows interleave.
declare -A epoch last records plainsize
echo "$bench: generating ${#replicas[@]} replicas x $segments segments of $mib MiB" >&2
seed=0
for ri in "${!replicas[@]}"; do
  r=${replicas[$ri]}
  e=$((1796378400000 + ri * 7))
  for ((k = 1; k <= segments; k++)); do
    seed=$((seed + 1))
    f=$tmp/gen/$r.$k.jsonl
    if [[ $r == gpu-c ]]; then
      "$gen" "$f" $((mib << 20)) "$seed" 64 >/dev/null
    else
      "$gen" "$f" $((mib << 20)) "$seed" >/dev/null
    fi
    id=$r.$k
    epoch[$id]=$e
    last[$id]=$(tail -n 1 "$f" | sed -E 's/^\{"timestamp":([0-9]+).*/\1/')
    records[$id]=$(wc -l <"$f")
    plainsize[$id]=$(stat -c %s "$f")
    e=$((e + last[$id] + 1000))
  done
done

utc_name() {  # utc_name UNIX_MS -> 20261204T100000.000Z
  printf '%s.%03dZ' "$(date -u -d "@$(($1 / 1000))" +%Y%m%dT%H%M%S)" $(($1 % 1000))
}
# manifest ID REPLICA DATA_KEY FILE: the uploader's manifest (the capture's own fields plus
# replica, records and objects).
manifest() {
  local id=$1 r=$2 key=$3 file=$4 k=${1##*.}
  local e=${epoch[$id]} size sha
  size=$(stat -c %s "$file")
  sha=$(sha256sum "$file" | cut -d' ' -f1)
  cat <<EOF
{
  "schema": "llmtap.capture.manifest/v1",
  "capture_path": "/captures/requests.jsonl",
  "format": "mooncake_payload",
  "timestamp_zero_unix_ms": $e,
  "host": "host-$r",
  "pid": 1,
  "started_utc": "2026-12-04T10:00:00.000Z",
  "state": "rotated",
  "file": {"sequence": $k, "records": ${records[$id]}, "bytes": ${plainsize[$id]}, "last_timestamp_ms": ${last[$id]}},
  "counters": {"recorded": ${records[$id]}},
  "replica": "$r",
  "records": ${records[$id]},
  "objects": [{"role": "data", "key": "$key", "bytes": $size, "sha256": "$sha"}]
}
EOF
}

mem=${RGW_MEMSTORE_BYTES:-$((8 << 30))}
RGW_MEMSTORE_BYTES=$mem tests/lib/rgw.sh start "$rgw" >/dev/null
# STORE_CPU=N CLIENT_CPU=M: the store's daemons on CPU N and curl and llmtap on CPU M, as when
# the store runs on other machines (S3 does) and the client does not pay for its CPU.
client=()
if [[ -n ${STORE_CPU:-} || -n ${CLIENT_CPU:-} ]]; then
  [[ -n ${STORE_CPU:-} && -n ${CLIENT_CPU:-} ]] || { echo "$bench: set both STORE_CPU and CLIENT_CPU" >&2; exit 2; }
  for f in "$rgw"/run/*.pid; do taskset -a -p -c "$STORE_CPU" "$(cat "$f")" >/dev/null; done
  client=(taskset -c "$CLIENT_CPU")
  echo "$bench: store on CPU $STORE_CPU, curl and llmtap on CPU $CLIENT_CPU" >&2
fi
set -a
# shellcheck disable=SC1091
. "$rgw/env"
set +a
export AWS_ENDPOINT_URL_S3=$RGW_ENDPOINT
tests/lib/rgw.sh mb "$rgw" bench >/dev/null
timer=()  # set while a run is timed: its client's CPU seconds go to $out/cpu
s3curl() {
  "${timer[@]}" "${client[@]}" curl -sS --fail --noproxy '*' --aws-sigv4 "aws:amz:$AWS_REGION:s3" \
    -u "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$@"
}

# Upload each layout; keep the same files with their manifests locally for merge-local.
declare -A stored urls_seq local_inputs rows_total
for layout in $layouts; do
  stored[$layout]=0
  urls_seq[$layout]=""
  local_inputs[$layout]=""
  rows_total[$layout]=0
  for r in "${replicas[@]}"; do
    mkdir -p "$tmp/$layout/$r"
    for ((k = 1; k <= segments; k++)); do
      id=$r.$k
      name=requests.$(utc_name "${epoch[$id]}").jsonl
      src=$tmp/gen/$id.jsonl
      if [[ $layout == zstd ]]; then
        data=$tmp/$layout/$r/$name.zst
        zstd -q -3 --long=24 "$src" -o "$data"
      else
        data=$tmp/$layout/$r/$name
        ln "$src" "$data"
      fi
      key=$layout/$r/$(basename "$data")
      manifest "$id" "$r" "$key" "$data" >"$tmp/$layout/$r/$name.manifest.json"
      s3curl -o /dev/null -T "$data" "$RGW_ENDPOINT/bench/$key"
      s3curl -o /dev/null -T "$tmp/$layout/$r/$name.manifest.json" \
        "$RGW_ENDPOINT/bench/$layout/$r/$name.manifest.json"
      stored[$layout]=$((stored[$layout] + $(stat -c %s "$data")))
      rows_total[$layout]=$((rows_total[$layout] + records[$id]))
      urls_seq[$layout]+=" $RGW_ENDPOINT/bench/$key"
      local_inputs[$layout]+=" $data"
    done
  done
done
# Objects in key order, as merge lists them.
for layout in $layouts; do
  urls_seq[$layout]=$(tr ' ' '\n' <<<"${urls_seq[$layout]}" | sed '/^$/d' | sort | tr '\n' ' ')
  local_inputs[$layout]=$(tr ' ' '\n' <<<"${local_inputs[$layout]}" | sed '/^$/d' | sort | tr '\n' ' ')
done

now() { date +%s.%N; }
# The store's CPU seconds so far (utime + stime of its daemons).
store_cpu() {
  local f t=0
  for f in "$rgw"/run/*.pid; do
    t=$((t + $(awk '{print $14 + $15}' "/proc/$(cat "$f")/stat" 2>/dev/null || echo 0)))
  done
  calc "$t / $(getconf CLK_TCK)"
}
calc() { awk "BEGIN { printf \"%.6f\", $1 }"; }
run_curl_seq() {  # LAYOUT: seconds
  local args=() u t0
  local timer=(/usr/bin/time -f "%U %S" -o "$out/cpu")
  for u in ${urls_seq[$1]}; do args+=(-o /dev/null "$u"); done
  t0=$(now)
  s3curl "${args[@]}"
  calc "$(now) - $t0"
}
run_curl_par() {
  local args=() u t0
  local timer=(/usr/bin/time -f "%U %S" -o "$out/cpu")
  for u in ${urls_seq[$1]}; do args+=(-o /dev/null "$u"); done
  t0=$(now)
  s3curl --parallel --parallel-max 3 --no-progress-meter "${args[@]}"
  calc "$(now) - $t0"
}
run_merge() {  # LAYOUT s3|s3-base|local: seconds
  local t0 rc=0 log=$out/merge.log
  local timer=(/usr/bin/time -f "%U %S" -o "$out/cpu")
  rm -f "$out/merged.jsonl" "$out/merged.jsonl.manifest.json"
  t0=$(now)
  if [[ $2 == s3 ]]; then
    "${timer[@]}" "${client[@]}" "$llmtap" merge "s3://bench/$1/" -o "$out/merged.jsonl" >"$log" 2>&1 || rc=$?
  elif [[ $2 == s3-base ]]; then
    "${timer[@]}" "${client[@]}" "$baseline" merge "s3://bench/$1/" -o "$out/merged.jsonl" >"$log" 2>&1 || rc=$?
  else
    # shellcheck disable=SC2086
    "${timer[@]}" "${client[@]}" "$llmtap" merge ${local_inputs[$1]} -o "$out/merged.jsonl" >"$log" 2>&1 || rc=$?
  fi
  local t
  t=$(calc "$(now) - $t0")
  if ((rc != 0)); then
    echo "$bench: merge ($1, $2) exited $rc:" >&2
    cat "$log" >&2
    exit 1
  fi
  echo "$t"
}

# Once: the store merge gives the local merge's bytes, and every row.
for layout in $layouts; do
  run_merge "$layout" s3 >/dev/null
  mv "$out/merged.jsonl" "$out/merged.s3.jsonl"
  run_merge "$layout" local >/dev/null
  cmp -s "$out/merged.jsonl" "$out/merged.s3.jsonl" ||
    { echo "$bench: $layout: the store merge differs from the local merge" >&2; exit 1; }
  n=$(wc -l <"$out/merged.jsonl")
  ((n == rows_total[$layout])) ||
    { echo "$bench: $layout: merged $n rows of ${rows_total[$layout]}" >&2; exit 1; }
  rm -f "$out"/merged*.jsonl
done

plain_bytes=0
for id in "${!plainsize[@]}"; do plain_bytes=$((plain_bytes + plainsize[$id])); done
echo "$bench: ${#replicas[@]} replicas x $segments segments, $(numfmt --to=iec "$plain_bytes") of rows" \
  "(${rows_total[$(awk '{print $1}' <<<"$layouts")]} rows), $rounds rounds, RGW at $RGW_ENDPOINT"
for layout in $layouts; do
  echo "$bench: $layout: $(numfmt --to=iec "${stored[$layout]}") stored"
done
echo "$bench: load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
kinds=(curl-seq curl-par merge-s3 merge-local)
[[ -z $baseline ]] || kinds+=(merge-s3-base)
declare -A times
for ((round = 1; round <= rounds; round++)); do
  for layout in $layouts; do
    order=("${kinds[@]}")
    if ((round % 2 == 0)); then
      order=()
      for ((i = ${#kinds[@]} - 1; i >= 0; i--)); do order+=("${kinds[$i]}"); done
    fi
    line="$bench: round $round: $layout:"
    for kind in "${order[@]}"; do
      s0=$(store_cpu)
      case $kind in
        curl-seq) t=$(run_curl_seq "$layout") ;;
        curl-par) t=$(run_curl_par "$layout") ;;
        merge-s3) t=$(run_merge "$layout" s3) ;;
        merge-local) t=$(run_merge "$layout" local) ;;
        merge-s3-base) t=$(run_merge "$layout" s3-base) ;;
      esac
      times[$layout.$kind]+=" $t"
      # CPU seconds of the client (curl: the last of its processes) and of the store.
      line+=$(printf ' %s %.3f s (%.0f MB/s; CPU-s client %s, store %s)' "$kind" "$t" \
        "$(calc "${stored[$layout]} / $t / 1000000")" \
        "$(awk '{printf "%.2f", $1 + $2}' "$out/cpu" 2>/dev/null)" "$(calc "$(store_cpu) - $s0")")
    done
    echo "$line"
  done
done

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for layout in $layouts; do
  declare -A med=()
  for kind in "${kinds[@]}"; do
    # shellcheck disable=SC2086
    med[$kind]=$(median ${times[$layout.$kind]})
  done
  best_curl=${med[curl-seq]} best_kind=curl-seq
  if awk "BEGIN { exit !(${med[curl-par]} < ${med[curl-seq]}) }"; then
    best_curl=${med[curl-par]} best_kind=curl-par
  fi
  mbs() { calc "${stored[$layout]} / $1 / 1000000"; }
  printf '%s: %s: median MB/s of stored bytes: curl-seq %.0f, curl-par %.0f, merge-s3 %.0f, merge-local %.0f\n' \
    "$bench" "$layout" "$(mbs "${med[curl-seq]}")" "$(mbs "${med[curl-par]}")" \
    "$(mbs "${med[merge-s3]}")" "$(mbs "${med[merge-local]}")"
  printf '%s: %s: merge-s3/%s throughput %.3f, merge-s3/merge-local %.3f (rows: merge-s3 %.0f MB/s)\n' \
    "$bench" "$layout" "$best_kind" "$(calc "$best_curl / ${med[merge-s3]}")" \
    "$(calc "${med[merge-local]} / ${med[merge-s3]}")" "$(calc "$plain_bytes / ${med[merge-s3]} / 1000000")"
  # Per round: merge-s3 against the faster curl of the same round (drift hits a round's runs
  # alike), then the median and range of those ratios.
  read -r -a seq_t <<<"${times[$layout.curl-seq]}"
  read -r -a par_t <<<"${times[$layout.curl-par]}"
  read -r -a mrg_t <<<"${times[$layout.merge-s3]}"
  pairs=()
  for i in "${!mrg_t[@]}"; do
    pairs+=("$(awk -v a="${seq_t[$i]}" -v b="${par_t[$i]}" -v m="${mrg_t[$i]}" \
      'BEGIN { printf "%.3f", (a < b ? a : b) / m }')")
  done
  printf '%s: %s: per round, merge-s3/faster curl: median %s (rounds: %s)\n' "$bench" "$layout" \
    "$(median "${pairs[@]}")" "${pairs[*]}"
  if [[ -n $baseline ]]; then
    printf '%s: %s: merge-s3-base %.0f MB/s: merge-s3/merge-s3-base throughput %.3f\n' "$bench" \
      "$layout" "$(mbs "${med[merge-s3-base]}")" "$(calc "${med[merge-s3-base]} / ${med[merge-s3]}")"
  fi
done
echo "$bench: load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
