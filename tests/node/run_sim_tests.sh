#!/usr/bin/env bash
# run_sim_tests.sh LLMTAP_BINARY: starts `llmtap sim` on a free loopback port, waits for /health,
# runs the openai-client and anthropic-client (@anthropic-ai/sdk, Messages API) conformance tests
# (node --test) against it, and stops it by PID.
set -euo pipefail
source "$(dirname "$0")/common.sh" "$1"
if [[ ! -d "$here/node_modules/@anthropic-ai/sdk" ]]; then
  echo "run_sim_tests: $here/node_modules/@anthropic-ai/sdk is missing; run scripts/setup.sh" >&2
  exit 1
fi
work=$(mktemp -d)
sim_pid=""
cleanup() {
  if [[ -n "$sim_pid" ]]; then
    kill "$sim_pid" 2>/dev/null || true
    wait "$sim_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# Port 0: the server picks a free port and prints it, so parallel test runs never collide. The log
# exists before the server starts: the background job opens it itself, possibly after the first read.
: >"$work/out"
"$llmtap" sim --listen 127.0.0.1:0 --served-model-name llmtap-sim m --ttft-ms 2 --prefill-us-per-token 1 --itl-ms 0.5 \
  --itl-jitter-ms 0.2 --output-tokens-mean 20 --output-tokens-stddev 5 >"$work/out" 2>&1 &
sim_pid=$!
port=""
deadline=$((SECONDS + 120))  # until it listens or exits; 120 s is a guard against a hang only
while ((SECONDS <= deadline)); do
  port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/out")
  [[ -n "$port" ]] && break
  kill -0 "$sim_pid" 2>/dev/null || { cat "$work/out" >&2; exit 1; }
  sleep 0.05
done
[[ -n "$port" ]] || { echo "run_sim_tests: llmtap sim did not start" >&2; cat "$work/out" >&2; exit 1; }
node -e '
  const url = process.argv[1];
  (async () => {
    // Until it answers (120 s: a guard against a hang only).
    for (const end = Date.now() + 120000; Date.now() < end;) {
      try { if ((await fetch(url)).status === 200) return; } catch {}
      await new Promise((r) => setTimeout(r, 50));
    }
    console.error("run_sim_tests: /health never answered 200"); process.exit(1);
  })();' "http://127.0.0.1:$port/health"

cd "$here"
LLMTAP_SIM_URL="http://127.0.0.1:$port/v1" node --test --test-reporter=spec sim.test.mjs \
  sim_messages.test.mjs

# The sim must stop cleanly, without a sanitizer report (the suite also runs ASan and TSan builds).
kill -TERM "$sim_pid"
status=0
wait "$sim_pid" || status=$?
sim_pid=""
if [[ $status -ne 0 ]] || grep -qE 'ThreadSanitizer|AddressSanitizer|LeakSanitizer|runtime error:' "$work/out"; then
  echo "run_sim_tests: llmtap sim exited with $status or reported a sanitizer error:" >&2
  cat "$work/out" >&2
  exit 1
fi
