# generated_capture.sh: sourced by the benchmarks that run llmtap on a capture made by
# bench/trace_gen (trace_bench.sh, anonymize_bench.sh, sessions_bench.sh, upload_vs_curl.sh,
# zstd_bench.sh), from the repository root, with the arguments BUILD_DIR [BYTES [TOOL...]]:
# TOOLs are further programs under BUILD_DIR that the script runs (bench/upload_bench), checked
# like llmtap and trace_gen. The sourcing script sets `bench` (its name, for messages) first,
# and `default_bytes` unless it always passes BYTES. Sets build, bytes, llmtap, gen and tmp
# (BUILD_DIR/bench-tmp, created), and defines `generate_capture FILE`: writes the capture
# (seed 1), sets `size` and `rows`, and reads it once so it sits in the page cache; and
# `median NUMBER...`, the middle one.
build=${1:-build}
bytes=${2:-$default_bytes}
llmtap=$build/llmtap
gen=$build/bench/trace_gen
for tool in llmtap bench/trace_gen "${@:3}"; do
  [[ -x $build/$tool ]] || { echo "$bench: $build/$tool missing; build it first" >&2; exit 2; }
done
tmp=$build/bench-tmp
mkdir -p "$tmp"

generate_capture() {
  "$gen" "$1" "$bytes" 1 >/dev/null
  size=$(stat -c %s "$1")
  rows=$(wc -l <"$1")
  cat "$1" >/dev/null
}

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
