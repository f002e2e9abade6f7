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
# --- podman: the tests under tests/containers run jobs inside images with the real podman
# (scripts/podman.sh installs it and writes the limits and runtime this kind of machine needs).
# Under CI (CI=true) a containers test fails, never skips, when podman does not work.
bash scripts/podman.sh install
# --- end podman
# --- PostgreSQL: a throwaway cluster (scripts/postgres.sh) for tests/postgres, and for a second
# pass of the server and integration tests on PostgreSQL after the whole suite on SQLite. Started
# here and deleted on exit (destroy) unless it was already running. Under CI a PostgreSQL test
# fails, never skips, when the cluster cannot be reached.
pg_started_here=0
stop_postgres() { if [[ $pg_started_here -eq 1 ]]; then bash scripts/postgres.sh destroy; fi; }
pg_previous_trap=$(trap -p EXIT | sed -E "s/^trap -- '(.*)' EXIT$/\1/")
trap "stop_postgres; ${pg_previous_trap}" EXIT
if ! bash scripts/postgres.sh url >/dev/null 2>&1; then
    pg_started_here=1
    bash scripts/postgres.sh start >/dev/null
fi
# --- end PostgreSQL
# --- Registry: a local OCI registry (scripts/registry.sh, Debian's docker-registry on 127.0.0.1)
# for tests/containers. Started here and stopped on exit unless it was already running. Under CI a
# containers test fails, never skips, when the registry cannot be reached.
registry_started_here=0
stop_registry() { if [[ $registry_started_here -eq 1 ]]; then bash scripts/registry.sh stop; fi; }
registry_previous_trap=$(trap -p EXIT | sed -E "s/^trap -- '(.*)' EXIT$/\1/")
trap "stop_registry; ${registry_previous_trap}" EXIT
if ! bash scripts/registry.sh status >/dev/null 2>&1; then
    registry_started_here=1
    bash scripts/registry.sh start >/dev/null
fi
STARFORGE_TEST_REGISTRY=$(bash scripts/registry.sh url)
export STARFORGE_TEST_REGISTRY
# --- end Registry
# The tiny models and data the tests build from the trl templates (tests/tiny_inputs.py): built
# once for both pytest sessions below, in a folder removed on exit.
STARFORGE_TEST_INPUTS=$(mktemp -d -t starforge-test-inputs.XXXXXX)
export STARFORGE_TEST_INPUTS
inputs_previous_trap=$(trap -p EXIT | sed -E "s/^trap -- '(.*)' EXIT$/\1/")
trap "rm -rf '$STARFORGE_TEST_INPUTS'; ${inputs_previous_trap}" EXIT
# Two workers (STARFORGE_TEST_WORKERS): the tests of one outside resource (the Slurm cluster,
# PostgreSQL's leader election) stay on one worker (tests/conftest.py, --dist loadgroup).
workers=(-n "${STARFORGE_TEST_WORKERS:-2}" --dist loadgroup --durations=15)
set +e
.venv/bin/python -m pytest "${workers[@]}" "$@"
code=$?
set -e
if [[ $code -eq 5 ]]; then
    echo "pytest collected no tests: that is a failure here" >&2
    exit 1
fi
# --- PostgreSQL: the whole run (no arguments) also runs the server and integration tests on it.
if [[ $# -eq 0 ]]; then
    echo "==> tests/server and tests/integration again, on PostgreSQL"
    set +e
    STARFORGE_TEST_DATABASE_URL=$(bash scripts/postgres.sh url) \
        .venv/bin/python -m pytest "${workers[@]}" tests/server tests/integration -m "not training"
    pg_code=$?
    set -e
    if [[ $code -eq 0 ]]; then code=$pg_code; fi
fi
# --- end PostgreSQL
exit $code
