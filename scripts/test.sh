#!/usr/bin/env bash
# The README's second command and what CI runs: the whole test suite.
#   1. Release build (unity batches, as scripts/run.sh builds it), the tests labelled "release":
#      what only a release tree makes (the .deb, the container image, the Python module and
#      wheel with the middleware's tests) and the README walk of the release binary.
#   2. AddressSanitizer + UndefinedBehaviorSanitizer build, every test: the GoogleTest programs
#      and the script tests (the built binaries driven by real clients: node, Python, curl).
#      Both are built and run here only, not again in release (LLMTAP_UNIT_TESTS=OFF there; the
#      script tests other than "release" are left out of its ctest run): this tree checks
#      everything the release run would, and memory and undefined behaviour besides. Run in both
#      trees, the script tests cost 175 CPU-s more in release and held its stage at 205-232 s.
#   3. ThreadSanitizer build, the tests labelled "concurrency" (the node integration tests with
#      real clients included).
#   4. The libFuzzer targets (clang 14, ASan + UBSan), 20 s each from their seed corpora.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/lib/test_stages.sh  # release_tests, asan_tests, tsan_tests, slowest
export CTEST_OUTPUT_ON_FAILURE=1
stage() { echo "== $1 (at $((SECONDS / 60))m$((SECONDS % 60))s)"; }

# Sanitizer builds: -O1 -g1 (line tables, enough for every report's stack) compiles in half the
# time of RelWithDebInfo's -O2 -g (Boost.Beast/Asio files: 48 s -> 21 s of CPU each under ASan),
# and -O1 is what the sanitizers' own documentation suggests. Asserts stay off, as in release.
# The libraries compile as unity batches there (LLMTAP_UNITY_BUILD, CMakeLists.txt): under a
# sanitizer every file instruments its own copy of each inline function of the standard
# library, CLI11, JSON and Beast it uses; a batch does it once. Both trees link with lld, and
# the ASan+UBSan tree's programs are not position-independent (each process starts in 2/3 of
# the CPU: CMakeLists.txt). Batches of 16 sources, not the default 8: replay 0.81x, trace 0.89x
# of the compile CPU (BENCHMARKS.md).
sanitizer_build=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
  -DLLMTAP_BUILD_BENCH=OFF -DLLMTAP_UNITY_BUILD=ON -DLLMTAP_UNITY_BATCH_SIZE=16)

# While a stage's tests run, the next tree compiles in the background at the lowest priority
# (nice 19): the tests mostly wait, so the compiler gets the cores' idle time and the tests
# still get a core whenever they want one. A background build that fails stops the suite at the
# wait, with the compiler's errors. A stage that fails (or ^C) stops the background build too:
# it runs in a process group of its own, which the exit trap ends.
bg_pid=""
background() {  # background COMMAND...: starts it at nice 19 in its own process group; sets bg_pid
  setsid nice -n 19 "$@" &
  bg_pid=$!
}
stop_background() {
  if [[ -n $bg_pid ]] && kill -0 "$bg_pid" 2>/dev/null; then
    echo "test.sh: stopping the background build (pid $bg_pid)" >&2
    kill -TERM -- "-$bg_pid" 2>/dev/null || true
    wait "$bg_pid" 2>/dev/null || true
  fi
}
trap stop_background EXIT

# The release tree is the one scripts/run.sh builds `llmtap` in (same options, so nothing is
# compiled twice), with the script tests and benchmarks added. Unity batches there too.
stage "release build"
scripts/build.sh build -DLLMTAP_BUILD_TESTS=ON -DLLMTAP_UNIT_TESTS=OFF -DLLMTAP_BUILD_BENCH=ON \
  -DLLMTAP_UNITY_BUILD=ON
stage "release tests (asan+ubsan tree compiling in the background)"
background scripts/build.sh build-asan "${sanitizer_build[@]}" -DLLMTAP_SANITIZE=address
# How many tests run at once in each stage: scripts/lib/test_stages.sh. The GoogleTest files of
# a directory are one program and one ctest test (CMakeLists.txt, llmtap_test), and the longest
# tests carry a COST so that ctest starts them first on a clean clone.
release_tests
slowest build

stage "asan+ubsan build (rest)"
wait "$bg_pid"
stage "asan+ubsan tests (tsan tree compiling in the background)"
BUILD_TARGET=concurrency_tests background scripts/build.sh build-tsan "${sanitizer_build[@]}" \
  -DLLMTAP_SANITIZE=thread
asan_tests
slowest build-asan

stage "tsan build (rest)"
wait "$bg_pid"
stage "tsan concurrency tests (fuzz targets compiling in the background)"
FUZZ_BUILD_ONLY=1 background fuzz/run.sh 20 build-fuzz
tsan_tests
slowest build-tsan

stage "fuzz targets, 20 s each"
wait "$bg_pid"
fuzz/run.sh 20 build-fuzz
stage "done"
