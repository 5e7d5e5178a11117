#!/usr/bin/env bash
# run_framing_tests.sh LLMTAP_BINARY: the response-framing tests (issue #35; node --test):
# http_framing.test.mjs (llmtap sim, llmtap proxy capturing, the proxy listening with TLS,
# against HTTP/1.0, Connection: close and keep-alive clients over raw sockets, streamed and not)
# and nginx_default.test.mjs (an unprivileged nginx with its default proxy_pass settings, and
# with proxy_http_version 1.1, in front of the sim and of the proxy, curl -sN through it). Each
# file starts its own processes on free loopback ports and stops them by PID. The ASGI
# middleware's framing test (http_framing_asgi.test.mjs) runs in run_asgi_tests.sh.
set -euo pipefail
source "$(dirname "$0")/common.sh" "$1"
fail() { echo "run_framing_tests: $*" >&2; exit 1; }
command -v nginx >/dev/null || fail "nginx is missing; run scripts/setup.sh (Debian package nginx-light)"
command -v curl >/dev/null || fail "curl is missing; run scripts/setup.sh"
command -v openssl >/dev/null || fail "the openssl CLI is missing (tests/lib/make_test_certs.sh needs it); run scripts/setup.sh (Debian package openssl)"
cd "$here"
LLMTAP_BIN="$llmtap" node --test --test-reporter=spec http_framing.test.mjs nginx_default.test.mjs
