#!/usr/bin/env bash
# build.sh [DIR] [extra cmake args...]: configures and builds llmtap into DIR (default
# build/). Prints only what goes wrong. BUILD_TARGET=T builds target T only (default: all).
# A new build directory uses Ninja when it is installed (scripts/setup.sh installs it): it starts
# a target's compiles before the libraries it links are built, so both cores stay busy; a
# directory configured before keeps its generator.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
jobs=$(nproc)
mkdir -p "$dir"
generator=()
[[ ! -f "$dir/CMakeCache.txt" ]] && command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@" >"$dir/configure.log" 2>&1 ||
  { cat "$dir/configure.log"; exit 1; }
if ! cmake --build "$dir" -j "$jobs" ${BUILD_TARGET:+--target "$BUILD_TARGET"} >"$dir/build.log" 2>&1; then
  grep -vE '^\[ *[0-9]+(%|/[0-9]+)\] (Building|Linking|Built)' "$dir/build.log" | tail -200
  echo "build.sh: build of $dir failed (full log: $dir/build.log)" >&2
  exit 1
fi
