#!/usr/bin/env bash
# build.sh [DIR] [extra cmake args...]: configures and builds llmtap into DIR (default
# build/). Prints only what goes wrong. BUILD_TARGET=T builds target T only (default: all).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
jobs=$(nproc)
mkdir -p "$dir"
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" >"$dir/configure.log" 2>&1 ||
  { cat "$dir/configure.log"; exit 1; }
if ! cmake --build "$dir" -j "$jobs" ${BUILD_TARGET:+--target "$BUILD_TARGET"} >"$dir/build.log" 2>&1; then
  grep -vE '^\[ *[0-9]+%\] (Building|Linking|Built)' "$dir/build.log" | tail -200
  echo "build.sh: build of $dir failed (full log: $dir/build.log)" >&2
  exit 1
fi
