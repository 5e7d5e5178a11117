#!/usr/bin/env bash
# run_replay_tests.sh LLMTAP_BINARY: the `llmtap replay` integration tests (node --test). Each
# test starts `llmtap sim` on a free loopback port, runs `llmtap replay` against it and stops
# the sim by PID.
set -euo pipefail
source "$(dirname "$0")/common.sh" "$1"
cd "$here"
LLMTAP_BIN="$llmtap" node --test --test-reporter=spec replay.test.mjs
