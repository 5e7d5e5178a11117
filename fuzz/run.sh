#!/usr/bin/env bash
# fuzz/run.sh [SECONDS_PER_TARGET] [BUILD_DIR] [TARGET...]: builds the libFuzzer targets with
# clang 14 (ASan + UBSan; the libraries in unity batches, as scripts/test.sh builds them) and
# runs each for a bounded time from its seed corpus in fuzz/corpus/<target>/ (new inputs go to
# BUILD_DIR/corpus/<target>/, never into the repo).
# Exit 1 if any target finds a crash; its reproducer is saved as BUILD_DIR/crash-<target>-*.
# The test suite runs it for a few seconds per target; RELIABILITY.md records long runs.
# The targets run nproc at a time, each for SECONDS of its own.
# FUZZ_RUNS=N runs each target for N executions instead of SECONDS (SECONDS is then ignored).
# FUZZ_BUILD_ONLY=1 builds the targets and stops (scripts/test.sh builds them while other tests run).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
dir=${2:-build-fuzz}
shift 2 || shift $# || true
targets=("$@")
if ((${#targets[@]} == 0)); then
  targets=(config_fuzz capture_line_fuzz trace_reader_fuzz usage_scanner_fuzz http_request_fuzz
    tokenizer_fuzz)
fi
mkdir -p "$dir"
generator=()  # Ninja for a new directory, as scripts/build.sh
[[ ! -f "$dir/CMakeCache.txt" ]] && command -v ninja >/dev/null && generator=(-G Ninja)
CXX=clang++-14 cmake -S . -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLLMTAP_SANITIZE=fuzzer \
  -DLLMTAP_UNITY_BUILD=ON -DLLMTAP_UNITY_BATCH_SIZE=16 \
  >"$dir/configure.log" 2>&1 || { cat "$dir/configure.log"; exit 1; }
if ! cmake --build "$dir" -j "$(nproc)" --target "${targets[@]}" >"$dir/build.log" 2>&1; then
  grep -vE '^\[ *[0-9]+(%|/[0-9]+)\] (Building|Linking|Built)' "$dir/build.log" | tail -100
  echo "fuzz/run.sh: build failed (full log: $dir/build.log)" >&2
  exit 1
fi
[[ -n "${FUZZ_BUILD_ONLY:-}" ]] && exit 0
# The targets run side by side, nproc at a time (each is one single-threaded process): each
# still fuzzes for SECONDS of its own. Its summary is printed once it and every target before it
# in the list have finished, so the output keeps the list's order.
run_target() {  # run_target T: fuzzes T; its summary goes to $dir/T.out/.err, its status to .status
  local t=$1 corpus="$dir/corpus/$1" log="$dir/$1.log" start=$SECONDS runs
  mkdir -p "$corpus"
  local seeds=() dict=() limit=(-max_total_time="$seconds")
  [[ -d "fuzz/corpus/$t" ]] && seeds=("fuzz/corpus/$t")
  [[ -f "fuzz/$t.dict" ]] && dict=("-dict=fuzz/$t.dict")
  [[ -n "${FUZZ_RUNS:-}" ]] && limit=(-runs="$FUZZ_RUNS")
  if "$dir/fuzz/$t" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$dir/crash-$t-" -print_final_stats=1 "${dict[@]}" "$corpus" "${seeds[@]}" \
      >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "fuzz: $t: ${runs:-?} runs in $((SECONDS - start)) s, no crash" >"$dir/$t.out"
    echo 0 >"$dir/$t.status"
  else
    echo "fuzz: $t: FAILED (log: $log)" >"$dir/$t.err"
    grep -E 'ERROR|SUMMARY|Test unit written' "$log" | head -10 >>"$dir/$t.err" || true
    echo 1 >"$dir/$t.status"
  fi
}
status=0
reported=0
report_finished() {  # prints the summaries of the finished targets at the head of the list
  while ((reported < ${#targets[@]})) && [[ -f "$dir/${targets[reported]}.status" ]]; do
    local t=${targets[reported]}
    [[ -f "$dir/$t.out" ]] && cat "$dir/$t.out"
    [[ -f "$dir/$t.err" ]] && cat "$dir/$t.err" >&2
    [[ $(cat "$dir/$t.status") == 0 ]] || status=1
    rm -f "$dir/$t.out" "$dir/$t.err" "$dir/$t.status"
    reported=$((reported + 1))
  done
}
for t in "${targets[@]}"; do
  rm -f "$dir/$t.out" "$dir/$t.err" "$dir/$t.status"
done
parallel=$(nproc)
running=0
for t in "${targets[@]}"; do
  if ((running >= parallel)); then
    wait -n || true
    running=$((running - 1))
    report_finished
  fi
  run_target "$t" &
  running=$((running + 1))
done
wait
report_finished
if ((reported < ${#targets[@]})); then  # a run that stopped before it wrote its status
  echo "fuzz: ${targets[reported]}: FAILED (no result; log: $dir/${targets[reported]}.log)" >&2
  status=1
fi
exit $status
