#!/usr/bin/env bash
# llamacpp.sh setup | start PORT [llama-server flags...] | stop PORT | work: a real inference
# engine for the tests, llama.cpp's own llama-server (Debian's llama.cpp-tools 0.7.0, build
# 11669, on the CPU, serving a tiny generated model with the real Llama 3 tokenizer and chat
# template), from the offline bundle the machines share (its README says what it speaks).
#
#   setup            prepares the bundle's binaries and models once (about 6 s, then ~30 ms)
#   start PORT ...   starts llama-server on 127.0.0.1:PORT in the background and returns once it
#                    answers /health; extra flags go to llama-server (--embeddings --pooling mean,
#                    --reranking, --spec-type ngram-simple ...). LLAMA_MODEL / LLAMA_ALIAS choose
#                    another model (the bundle's cycle model: see its README).
#   stop PORT        stops that instance, by its pid file only
#   work             prints the directory the bundle was prepared in (models under model/)
#
# The bundle: LLMTAP_LLAMACPP_BUNDLE if set, else ../shared/engines/llamacpp beside the checkout
# (read-only; nothing of it is copied into the project). It is prepared into
# LLMTAP_LLAMACPP_WORK (default .cache/llamacpp in the checkout). The server runs at nice 10 with
# one thread, as the bundle starts it; its start is bounded only by a generous guard (300 s), so
# a loaded machine delays a test but does not fail it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
if [[ -n ${LLMTAP_LLAMACPP_BUNDLE:-} ]]; then
  bundle=$LLMTAP_LLAMACPP_BUNDLE
else
  bundle=$repo/../shared/engines/llamacpp
fi
if [[ ! -f $bundle/setup.sh ]]; then
  echo "llamacpp.sh: no llama.cpp bundle at $bundle (the machines' ../shared/engines/llamacpp);" \
    "set LLMTAP_LLAMACPP_BUNDLE to its folder" >&2
  exit 1
fi
bundle=$(cd "$bundle" && pwd)
export LLMTAP_LLAMACPP_WORK=${LLMTAP_LLAMACPP_WORK:-$repo/.cache/llamacpp}

case "${1:-}" in
  setup)
    mkdir -p "$LLMTAP_LLAMACPP_WORK"
    bash "$bundle/setup.sh" "$LLMTAP_LLAMACPP_WORK" >"$LLMTAP_LLAMACPP_WORK.setup.log" 2>&1 || {
      cat "$LLMTAP_LLAMACPP_WORK.setup.log" >&2
      echo "llamacpp.sh: preparing the llama.cpp bundle from $bundle failed" >&2
      exit 1
    }
    ;;
  start)
    shift
    "$0" setup
    START_TIMEOUT=${START_TIMEOUT:-300} exec bash "$bundle/start.sh" "$@"
    ;;
  stop)
    shift
    exec bash "$bundle/stop.sh" "${1:?usage: llamacpp.sh stop PORT}"
    ;;
  work)
    echo "$LLMTAP_LLAMACPP_WORK"
    ;;
  *)
    echo "usage: tests/engine/llamacpp.sh setup | start PORT [flags...] | stop PORT | work" >&2
    exit 2
    ;;
esac
