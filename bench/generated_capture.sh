# generated_capture.sh: sourced by the benchmarks that run llmtap on a capture made by
# bench/trace_gen (trace_bench.sh, anonymize_bench.sh), from the repository root, with the
# script's arguments BUILD_DIR [BYTES]. The sourcing script sets `bench` (its name, for
# messages) and `default_bytes` first. Sets build, bytes, llmtap, gen and tmp
# (BUILD_DIR/bench-tmp, created), and defines `generate_capture FILE`: writes the capture
# (seed 1), sets `size` and `rows`, and reads it once so it sits in the page cache.
build=${1:-build}
bytes=${2:-$default_bytes}
llmtap=$build/llmtap
gen=$build/bench/trace_gen
for tool in "$llmtap" "$gen"; do
  [[ -x $tool ]] || { echo "$bench: $tool missing; build it first" >&2; exit 2; }
done
tmp=$build/bench-tmp
mkdir -p "$tmp"

generate_capture() {
  "$gen" "$1" "$bytes" 1 >/dev/null
  size=$(stat -c %s "$1")
  rows=$(wc -l <"$1")
  cat "$1" >/dev/null
}
