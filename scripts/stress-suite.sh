#!/usr/bin/env bash
# stress-suite.sh: runs the suite's test stages (or some tests of one stage) while CPU hogs keep
# every core busy, to find the tests that pass only on a quiet machine before CI does. A test
# must pass at load 10: its waits bounded by events, not wall-clock limits, and its assertions
# following from what it allows.
#
#   scripts/stress-suite.sh [--hogs N] [--rounds K] [--stage release|asan|tsan|all] [-- CTEST_ARGS...]
#
#   --hogs N      busy loops at normal priority (nice 0) for the whole run; default: one per core
#   --rounds K    run the chosen stages K times in a row; default 1
#   --stage S     release (build/, label "release"), asan (build-asan/, every test), tsan
#                 (build-tsan/, label "concurrency") or all (the three in the suite's order);
#                 default all
#   -- ARGS       passed to each ctest run, e.g. `-- -R sessions_infer --repeat until-fail:20`
#
# The trees must be built (bash scripts/test.sh builds all three; a stage whose tree is missing
# is an error). Each ctest runs as the suite runs it (scripts/lib/test_stages.sh). Prints each
# round's time per stage and exits 1 if any run failed (every round still runs, so one run
# reports every flaky test); ctest's output of a failure names the test.
#
# Examples:
#   scripts/stress-suite.sh --rounds 3                      # the issue's check: 3 rounds, 2 hogs
#   scripts/stress-suite.sh --hogs 4 --stage asan -- -R proxy_integration_test
#   scripts/stress-suite.sh --stage release -- -R sessions --repeat until-fail:20
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/test_stages.sh

usage() {
  sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit "${1:-2}"
}

hogs=$(nproc)
rounds=1
stage=all
ctest_args=()
while (($#)); do
  case "$1" in
    --hogs) hogs=${2:?--hogs needs a number}; shift 2 ;;
    --rounds) rounds=${2:?--rounds needs a number}; shift 2 ;;
    --stage) stage=${2:?--stage needs release, asan, tsan or all}; shift 2 ;;
    -h | --help) usage 0 ;;
    --) shift; ctest_args=("$@"); break ;;
    *) echo "stress-suite.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ $hogs =~ ^[0-9]+$ ]] || { echo "stress-suite.sh: --hogs '$hogs' is not a number" >&2; exit 2; }
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "stress-suite.sh: --rounds '$rounds' is not a positive number" >&2; exit 2; }
case "$stage" in
  release) stages=(release) ;;
  asan) stages=(asan) ;;
  tsan) stages=(tsan) ;;
  all) stages=(release asan tsan) ;;
  *) echo "stress-suite.sh: --stage '$stage': one of release, asan, tsan, all" >&2; exit 2 ;;
esac
declare -A tree=([release]=build [asan]=build-asan [tsan]=build-tsan)
for s in "${stages[@]}"; do
  if [[ ! -f ${tree[$s]}/CTestTestfile.cmake ]]; then
    echo "stress-suite.sh: ${tree[$s]}/ is not built (bash scripts/test.sh builds the suite's trees)" >&2
    exit 2
  fi
done

hog_pids=()
stop_hogs() {
  ((${#hog_pids[@]})) && kill "${hog_pids[@]}" 2>/dev/null
  wait "${hog_pids[@]}" 2>/dev/null
  hog_pids=()
}
trap stop_hogs EXIT
trap 'exit 130' INT TERM
for ((i = 0; i < hogs; ++i)); do
  bash -c 'while :; do :; done' &
  hog_pids+=($!)
done
echo "stress-suite: $hogs CPU hog(s) running (pids ${hog_pids[*]:-none}), ${#stages[@]} stage(s) x $rounds round(s)"

export CTEST_OUTPUT_ON_FAILURE=1
failed=0
summary=()
for ((round = 1; round <= rounds; ++round)); do
  for s in "${stages[@]}"; do
    echo "== round $round: $s tests (load $(cut -d' ' -f1 /proc/loadavg))"
    start=$SECONDS
    "${s}_tests" "${ctest_args[@]}"
    rc=$?
    took=$((SECONDS - start))
    result=$([[ $rc -eq 0 ]] && echo pass || echo "FAIL (ctest exit $rc)")
    ((rc)) && failed=1
    summary+=("round $round  $s  ${took} s  $result")
  done
done
stop_hogs
echo "== stress-suite summary ($hogs hog(s))"
printf '  %s\n' "${summary[@]}"
exit "$failed"
