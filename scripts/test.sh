#!/usr/bin/env bash
# The test command: install, lint, then the whole suite (unit + integration + real training +
# the console in a real browser). On a fresh machine it installs everything first, so the suite
# it runs here is the one CI runs (.ci/run calls exactly this script).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup-browser.sh
export HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1
.venv/bin/ruff check src tests bench
.venv/bin/ruff format --check src tests bench
# --- Slurm: the tests under tests/slurm run against a real cluster (scripts/slurm.sh); this script
# starts it and stops it on exit, unless it was already running (then it is left as it was).
# STARFORGE_REQUIRE_SLURM=1 makes a Slurm test that cannot reach the cluster fail, never skip.
slurm_started_here=0
stop_slurm() { if [[ $slurm_started_here -eq 1 ]]; then bash scripts/slurm.sh stop >/dev/null; fi; }
trap stop_slurm EXIT
if ! bash scripts/slurm.sh status >/dev/null 2>&1; then
    slurm_started_here=1
    bash scripts/slurm.sh start
fi
export STARFORGE_REQUIRE_SLURM=1
# --- end Slurm
set +e
.venv/bin/python -m pytest "$@"
code=$?
set -e
if [[ $code -eq 5 ]]; then
    echo "pytest collected no tests: that is a failure here" >&2
    exit 1
fi
exit $code
