#!/usr/bin/env bash
# The main job: install, create ./demo-lab, submit a real tiny GRPO run to the embedded server,
# follow it to the end and show how its reward moved.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1
exec .venv/bin/sf demo demo-lab
