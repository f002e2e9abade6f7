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
# Compile our modules once, as pip does for an installed package: this kind of machine sets
# PYTHONDONTWRITEBYTECODE=1, so every server, runner, job and test helper process would compile
# them again (an up-to-date file is skipped; a stale .pyc is never used). The catalog's
# templates are copied into labs and run there, never imported from here: left alone.
.venv/bin/python -m compileall -q -x '/template/' src tests
