# common.sh: sourced by the run_*_tests.sh scripts with the llmtap binary as $1. Sets `llmtap`
# (its absolute path) and `here` (this directory), and checks that scripts/setup.sh installed
# the node packages.
llmtap=$(realpath "$1")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [[ ! -d "$here/node_modules/openai" ]]; then
  echo "$(basename "$0" .sh): $here/node_modules/openai is missing; run scripts/setup.sh" >&2
  exit 1
fi
