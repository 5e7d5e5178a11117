#!/usr/bin/env bash
# aiperf.sh setup | env | load INPUT [aiperf_load.py options...]: AIPerf's own dataset-loading code,
# the referee of every trace llmtap writes.
#
# AIPerf cannot be pip-installed here (no PyPI), so its source runs unmodified on Debian's
# Python packages (referee/README.md): `setup` prepares that environment once (unpacks the
# source, builds msgspec's C extension; about 20 s) and `load` pushes one file (or a raw_payload
# directory) through AIPerf's CLI conversion, pre-start checks, the custom dataset composer with
# the mooncake_trace / raw_payload loaders, and the fixed-schedule setup, then compares every
# turn with its row. `load` exits non-zero when AIPerf refuses the file; --json OUT gives the
# per-row results (see referee/aiperf_load.py).
#
# The referee: LLMTAP_AIPERF_DIR if set, else ../shared/aiperf beside the checkout when there
# is one (the machines' shared copy), else referee/ here (AIPerf 0.11.0, upstream main of
# 2026-07-07, a copy of that folder, Apache-2.0; msgspec BSD-3-Clause; ffmpeg-python Apache-2.0).
# The environment goes to LLMTAP_AIPERF_WORK (default: .cache/aiperf-env in the checkout).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
if [[ -n ${LLMTAP_AIPERF_DIR:-} ]]; then
  referee=$LLMTAP_AIPERF_DIR
elif [[ -f $repo/../shared/aiperf/aiperf_load.py ]]; then
  referee=$(cd "$repo/../shared/aiperf" && pwd)
else
  referee=$here/referee
fi
work=${LLMTAP_AIPERF_WORK:-$repo/.cache/aiperf-env}

pythonpath() {
  # Prepared once per referee: a different referee folder gets a fresh environment. Tests that
  # run at once wait for the one preparing it (the lock beside the folder).
  mkdir -p "$(dirname "$work")"
  exec 9>"$work.lock"
  flock 9
  if [[ ! -f $work/pythonpath || $(cat "$work/referee" 2>/dev/null) != "$referee" ]]; then
    rm -rf "$work"
    mkdir -p "$work"
    # The referee's setup prints apt's progress on stdout when it installs; its last line is the
    # PYTHONPATH (also written to $work/pythonpath).
    WORK=$work bash "$referee/setup.sh" >"$work/setup.log" 2>&1 ||
      { cat "$work/setup.log" >&2; echo "aiperf.sh: setting up AIPerf from $referee failed" >&2; exit 1; }
    echo "$referee" >"$work/referee"
  fi
  flock -u 9
  cat "$work/pythonpath"
}

case "${1:-}" in
  setup)
    pythonpath >/dev/null
    ;;
  env)  # prints PYTHONPATH=... and AIPERF_LOAD=... (for a caller that loads many files at once)
    pp=$(pythonpath)
    echo "PYTHONPATH=$pp"
    echo "AIPERF_LOAD=$referee/aiperf_load.py"
    ;;
  load)
    shift
    pp=$(pythonpath)
    PYTHONPATH=$pp exec python3 "$referee/aiperf_load.py" "$@"
    ;;
  *)
    echo "usage: tests/aiperf/aiperf.sh setup | env | load INPUT [aiperf_load.py options...]" >&2
    exit 2
    ;;
esac
