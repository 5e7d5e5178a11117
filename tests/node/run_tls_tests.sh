#!/usr/bin/env bash
# run_tls_tests.sh LLMTAP_BINARY [TEST_FILE...]: the TLS integration tests (node --test; default
# every *tls*.test.mjs here: the harness's self-test tls_nginx.test.mjs and the replay and proxy
# TLS tests). Each file starts `llmtap sim` and an unprivileged nginx terminating TLS in front of
# it (tls_nginx.mjs, certificates from tests/lib/make_test_certs.sh) on free loopback ports, and
# stops them by PID.
set -euo pipefail
source "$(dirname "$0")/common.sh" "$1"
shift
fail() { echo "run_tls_tests: $*" >&2; exit 1; }
command -v nginx >/dev/null || fail "nginx is missing; run scripts/setup.sh (Debian package nginx-light)"
nginx -V 2>&1 | grep -q -- --with-http_ssl_module ||
  fail "$(command -v nginx) lacks http_ssl_module (nginx -V); install Debian's nginx-light (scripts/setup.sh)"
command -v openssl >/dev/null || fail "the openssl CLI is missing (tests/lib/make_test_certs.sh needs it); run scripts/setup.sh (Debian package openssl)"
cd "$here"
files=("$@")
if [[ ${#files[@]} -eq 0 ]]; then
  shopt -s nullglob
  files=(*tls*.test.mjs)
fi
LLMTAP_BIN="$llmtap" node --test --test-reporter=spec "${files[@]}"
