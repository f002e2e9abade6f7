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
set +e
.venv/bin/python -m pytest "$@"
code=$?
set -e
if [[ $code -eq 5 ]]; then
    echo "pytest collected no tests: that is a failure here" >&2
    exit 1
fi
exit $code
