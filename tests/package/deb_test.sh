#!/usr/bin/env bash
# deb_test.sh BUILD_DIR SOURCE_DIR: builds llmtap_<version>_amd64.deb with CPack from the release
# tree, checks what it holds, installs it with `apt-get install ./llmtap_*.deb`, runs the
# installed /usr/bin/llmtap (the proxy in front of its built-in simulator, a request, the
# capture validated), checks the man page and the bash completion, and removes the package.
# Installing needs root; without it the steps after the contents check are skipped, said so.
set -uo pipefail
build=$(realpath "$1")
tmp=$(mktemp -d)
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
installed=0
proxy_pid=""
cleanup() {
  [[ -n $proxy_pid ]] && kill "$proxy_pid" 2>/dev/null
  ((installed)) && apt-get remove -y -qq llmtap >/dev/null 2>&1
  rm -rf "$tmp"
}
trap cleanup EXIT

(cd "$tmp" && cpack -G DEB --config "$build/CPackConfig.cmake" >cpack.log 2>&1) ||
  { cat "$tmp/cpack.log"; exit 1; }
version=$("$build/llmtap" --version | awk '{print $2}')
deb="$tmp/llmtap_${version}_amd64.deb"
[[ -f $deb ]] || { echo "FAIL: no $deb"; ls "$tmp"; exit 1; }
echo "package: $(basename "$deb"), $(stat -c %s "$deb") bytes"

contents=$(dpkg-deb -c "$deb" | awk '{print $6}')
for f in ./usr/bin/llmtap ./usr/share/man/man1/llmtap.1.gz \
         ./usr/share/bash-completion/completions/llmtap ./usr/share/doc/llmtap/README.md \
         ./usr/share/doc/llmtap/llmtap-proxy.service ./usr/share/doc/llmtap/copyright; do
  grep -qxF "$f" <<<"$contents" || fail "$f not in the package"
done
depends=$(dpkg-deb -f "$deb" Depends)
for lib in libre2 libsimdjson libssl3 libcurl4 libzstd1 libicu; do
  [[ $depends == *"$lib"* ]] || fail "Depends lacks $lib: $depends"
done

if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null; then
  echo "deb_test: SKIPPED the install steps: installing a package needs root and apt-get"
  exit $((fails > 0))
fi
if dpkg-query -W -f='${Status}' llmtap 2>/dev/null | grep -q "install ok installed"; then
  echo "deb_test: SKIPPED the install steps: an llmtap package is installed on this machine already"
  exit $((fails > 0))
fi
installed=1
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$deb" \
  >"$tmp/apt.log" 2>&1 || { cat "$tmp/apt.log"; exit 1; }
[[ $(/usr/bin/llmtap --version) == "llmtap $version" ]] || fail "installed --version: $(/usr/bin/llmtap --version)"

# The installed binary: the proxy in front of its built-in simulator, one request, a capture.
cd "$tmp"
: >"$tmp/proxy.out"  # before the job starts: the job opens it itself, maybe after the first read
/usr/bin/llmtap proxy --listen 127.0.0.1:0 --capture --capture-path "$tmp/c/requests.jsonl" \
  >"$tmp/proxy.out" 2>&1 &
proxy_pid=$!
port=""
deadline=$((SECONDS + 120))  # until it listens or exits; 120 s is a guard against a hang only
while ((SECONDS <= deadline)); do
  port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$tmp/proxy.out" | head -1)
  [[ -n $port ]] && break
  kill -0 "$proxy_pid" 2>/dev/null || break
  sleep 0.05
done
[[ -n $port ]] || { cat "$tmp/proxy.out"; exit 1; }
body='{"model":"llmtap-sim","messages":[{"role":"user","content":"hi"}],"max_tokens":4}'
code=$(curl -s -o "$tmp/answer.json" -w '%{http_code}' "http://127.0.0.1:$port/v1/chat/completions" \
  -H 'content-type: application/json' -d "$body")
[[ $code == 200 ]] || fail "the installed proxy answered $code: $(cat "$tmp/answer.json")"
kill -INT "$proxy_pid"
wait "$proxy_pid" || fail "the installed proxy exited $? on SIGINT"
proxy_pid=""
/usr/bin/llmtap validate "$tmp/c/requests.jsonl" >"$tmp/validate.out" 2>&1 ||
  { fail "validate of the capture"; cat "$tmp/validate.out"; }
[[ $(wc -l <"$tmp/c/requests.jsonl") == 1 ]] || fail "capture rows: $(wc -l <"$tmp/c/requests.jsonl")"

# The man page names every subcommand; the completion completes them and their flags.
man_text=$(zcat /usr/share/man/man1/llmtap.1.gz)
for sub in proxy sim replay split validate stats "report merge"; do
  grep -qF ".SS \"llmtap $sub\"" <<<"$man_text" || fail "man page has no section for '$sub'"
done
completion() {  # completion WORDS...: what the installed completion offers for the last word
  bash -c 'source /usr/share/bash-completion/completions/llmtap; COMP_WORDS=("$@");
           COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _llmtap; echo "${COMPREPLY[*]}"' _ "$@"
}
[[ $(completion llmtap prox) == proxy ]] || fail "completion of 'prox': $(completion llmtap prox)"
[[ $(completion llmtap proxy --sample-r) == --sample-rate ]] ||
  fail "completion of 'proxy --sample-r': $(completion llmtap proxy --sample-r)"

apt-get remove -y -qq llmtap >/dev/null 2>&1 || fail "apt-get remove llmtap"
installed=0
[[ ! -e /usr/bin/llmtap ]] || fail "/usr/bin/llmtap left after remove"
((fails == 0)) && echo "deb_test: installed, ran, removed: all checks passed"
exit $((fails > 0))
