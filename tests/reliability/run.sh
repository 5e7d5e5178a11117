#!/usr/bin/env bash
# run.sh LLMTAP_BINARY [TEST_FILE...]: the reliability suite's CI part (node --test): disk and process faults,
# hostile HTTP input, upstream faults, and no secret in any log line or metric (secrets.test.mjs),
# against real `llmtap proxy` and `llmtap sim` processes on free loopback ports. The
# full-filesystem test mounts a small tmpfs in the proxy's own mount namespace (unshare -m;
# as non-root, unshare -r -m is needed instead). See RELIABILITY.md for the longer runs. With
# TEST_FILEs, only those run (store_faults.test.mjs runs this way, under tests/lib/with_rgw.sh).
set -euo pipefail
suite=$(cd "$(dirname "$0")" && pwd)
source "$suite/../node/common.sh" "$1"
cd "$suite"
files=("${@:2}")
if ((${#files[@]} == 0)); then
  files=(disk_process.test.mjs hostile_http.test.mjs upstream_faults.test.mjs secrets.test.mjs)
fi
LLMTAP_BIN="$llmtap" node --test --test-reporter=spec "${files[@]}"
