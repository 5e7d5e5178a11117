#!/usr/bin/env bash
# validate_test.sh LLMTAP SOURCE_DIR [validate_test.py options...]: `llmtap validate` against
# AIPerf 0.11.0's own loader on the differential corpus (tests/aiperf/corpus): fails on any
# disagreement that is not a deliberate warning listed in `validate --help` (validate_test.py).
# No network: AIPerf's environment is prepared by tests/aiperf/aiperf.sh (once; scripts/setup.sh
# installs the Debian packages it runs on); AIPerf's artifacts go to a private TMPDIR.
set -euo pipefail
llmtap=$1
src=$2
shift 2
env=$(bash "$src/tests/aiperf/aiperf.sh" env)
pythonpath=$(sed -n 's/^PYTHONPATH=//p' <<<"$env")
aiperf_load=$(sed -n 's/^AIPERF_LOAD=//p' <<<"$env")
TMPDIR=$(mktemp -d)
export TMPDIR
trap 'rm -rf "$TMPDIR"' EXIT
PYTHONPATH=$pythonpath python3 "$src/tests/aiperf/validate_test.py" --llmtap "$llmtap" \
  --referee "$(dirname "$aiperf_load")" --corpus "$src/tests/aiperf/corpus" "$@"
