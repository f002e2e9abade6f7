#!/usr/bin/env bash
# Creates .venv and installs StarForge with everything the demo and the tests need (pinned in
# pyproject.toml). Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
if [[ ! -x .venv/bin/python ]]; then
    echo "==> creating .venv with $($PYTHON --version)"
    "$PYTHON" -m venv .venv
fi
stamp=.venv/.starforge-installed
if [[ ! -f "$stamp" || pyproject.toml -nt "$stamp" ]]; then
    echo "==> installing starforge[train,dev] (torch 2.13.0 CPU, TRL, FastAPI, ...)"
    # torch==2.13.0 is pinned so pip takes the CPU build instead of a multi-GB CUDA one.
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[train,dev]'
    touch "$stamp"
fi
# verl 0.9.1's own Hydra configs, for the suite's strict composition of the verl methods'
# overrides (tests/catalog/test_verl_methods.py; hydra-core is in the dev extra). Pinned, without
# its dependencies (Ray, vLLM, a transformers pin that clashes with ours: nothing imports verl
# here, only its YAML files are read), into a folder of its own off sys.path, because the wheel
# also installs top-level `tests` and `scripts` packages that would shadow ours. 1.7 MB.
verl_dir=.venv/share/starforge/verl-0.9.1
if [[ ! -f "$verl_dir/verl-0.9.1.dist-info/RECORD" ]]; then
    echo "==> installing verl 0.9.1's configs into $verl_dir"
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps \
        --target "$verl_dir" verl==0.9.1
fi
# Compile our modules once, as pip does for an installed package: this kind of machine sets
# PYTHONDONTWRITEBYTECODE=1, so every server, runner, job and test helper process would compile
# them again (an up-to-date file is skipped; a stale .pyc is never used). The catalog's
# templates are copied into labs and run there, never imported from here: left alone.
.venv/bin/python -m compileall -q -x '/template/' src tests
