#!/usr/bin/env bash
# run_replay_tests.sh LLMTAP_BINARY [TEST_FILE]: the `llmtap replay` integration tests (node
# --test; TEST_FILE default replay.test.mjs). Each test starts `llmtap sim` (and for sessions
# `llmtap proxy`) on free loopback ports, runs `llmtap replay` against it and stops them by PID.
set -euo pipefail
source "$(dirname "$0")/common.sh" "$1"
cd "$here"
LLMTAP_BIN="$llmtap" node --test --test-reporter=spec "${2:-replay.test.mjs}"
