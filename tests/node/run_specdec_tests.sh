#!/usr/bin/env bash
# run_specdec_tests.sh LLMTAP_BINARY: `llmtap specdec` against the simulator (node --test). The
# test starts llmtap sim and llmtap proxy on free loopback ports and stops them by PID.
set -euo pipefail
source "$(dirname "$0")/common.sh" "$1"
cd "$here"
LLMTAP_BIN="$llmtap" node --test --test-reporter=spec specdec.test.mjs
