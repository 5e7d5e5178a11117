# cli_test.sh: sourced by the CLI test scripts (src/*/..._cli_test.sh) with LLMTAP and
# SOURCE_DIR as $1 and $2. Sets `llmtap`, `data` (tests/data/traces), `tmp` (removed at exit)
# and `fails`, and defines `expect CODE DESCRIPTION -- command...` and `contains FILE TEXT`.
llmtap=$(realpath "$1")
data=$2/tests/data/traces
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
expect() {  # expect CODE DESCRIPTION -- command...
  local want=$1 what=$2
  shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [[ $got != "$want" ]]; then
    echo "FAIL: $what: exit $got, want $want"; cat "$tmp/out" "$tmp/err"; fails=$((fails + 1))
  fi
}
contains() {  # contains FILE TEXT
  grep -qF -- "$2" "$1" || { echo "FAIL: '$2' not in $1:"; cat "$1"; fails=$((fails + 1)); }
}
