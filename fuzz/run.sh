#!/usr/bin/env bash
# fuzz/run.sh [SECONDS_PER_TARGET] [BUILD_DIR] [TARGET...]: builds the libFuzzer targets with
# clang 14 (ASan + UBSan) and runs each for a bounded time from its seed corpus in
# fuzz/corpus/<target>/ (new inputs go to BUILD_DIR/corpus/<target>/, never into the repo).
# Exit 1 if any target finds a crash; its reproducer is saved as BUILD_DIR/crash-<target>-*.
# The test suite runs it for a few seconds per target; RELIABILITY.md records long runs.
# FUZZ_RUNS=N runs each target for N executions instead of SECONDS (SECONDS is then ignored).
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
CXX=clang++-14 cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLLMTAP_SANITIZE=fuzzer \
  >"$dir/configure.log" 2>&1 || { cat "$dir/configure.log"; exit 1; }
if ! cmake --build "$dir" -j "$(nproc)" --target "${targets[@]}" >"$dir/build.log" 2>&1; then
  grep -vE '^\[ *[0-9]+%\] (Building|Linking|Built)' "$dir/build.log" | tail -100
  echo "fuzz/run.sh: build failed (full log: $dir/build.log)" >&2
  exit 1
fi
status=0
for t in "${targets[@]}"; do
  corpus="$dir/corpus/$t"
  mkdir -p "$corpus"
  seeds=()
  [[ -d "fuzz/corpus/$t" ]] && seeds=("fuzz/corpus/$t")
  dict=()
  [[ -f "fuzz/$t.dict" ]] && dict=("-dict=fuzz/$t.dict")
  log="$dir/$t.log"
  limit=(-max_total_time="$seconds")
  [[ -n "${FUZZ_RUNS:-}" ]] && limit=(-runs="$FUZZ_RUNS")
  start=$SECONDS
  if "$dir/fuzz/$t" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$dir/crash-$t-" -print_final_stats=1 "${dict[@]}" "$corpus" "${seeds[@]}" \
      >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "fuzz: $t: ${runs:-?} runs in $((SECONDS - start)) s, no crash"
  else
    echo "fuzz: $t: FAILED (log: $log)" >&2
    grep -E 'ERROR|SUMMARY|Test unit written' "$log" | head -10 >&2
    status=1
  fi
done
exit $status
