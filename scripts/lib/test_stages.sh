# Sourced by scripts/test.sh and scripts/stress-suite.sh: how each test stage runs its ctest, so
# the suite and a stress run of it are one command line each. The trees are built elsewhere
# (scripts/test.sh builds them; scripts/stress-suite.sh expects them built).
#
# The script tests mostly wait (deadlines, think times, packages being built, servers starting):
# the release stage runs two per core (2 cores, that stage alone: 117 s -> 87 s). The ASan stage,
# with the CPU-bound GoogleTest programs, runs one more than the cores; the TSan stage (binaries
# 5-15x slower) one per core. Extra arguments go to ctest (-R, -E, --repeat ...).

test_stage_jobs=$(nproc)

release_tests() {  # release_tests [CTEST_ARGS...]: the tests labelled "release", in build/
  ctest --test-dir build -L release -j "$((test_stage_jobs * 2))" --timeout 300 "$@"
}

asan_tests() {  # asan_tests [CTEST_ARGS...]: every test, in build-asan/
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan -j "$((test_stage_jobs + 1))" --timeout 600 "$@"
}

tsan_tests() {  # tsan_tests [CTEST_ARGS...]: the tests labelled "concurrency", in build-tsan/
  TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/scripts/tsan.supp" \
    ctest --test-dir build-tsan -j "$test_stage_jobs" -L concurrency --timeout 600 "$@"
}

slowest() {  # slowest BUILD_DIR: the tests that took longest (where the suite's time goes)
  awk '/^---/ {exit} NF == 3 {printf "  %7.1f s  %s\n", $3, $1}' \
    "$1/Testing/Temporary/CTestCostData.txt" 2>/dev/null | sort -gr | awk 'NR <= 8' || true
}
