"""The chaos soak, short and seeded: ``bench/soak.py`` as a user runs it, on a PostgreSQL cluster
of its own with two server processes, faults landing while custom jobs, output datasets,
webhooks, preemption and pause/resume go on; every invariant of its JSON must hold.

The trl pipelines and sweeps stay out (``--no-trl``: they train for real, minutes on two cores);
the long run (docs/soak.md) has them.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.postgres

SOAK = Path(__file__).resolve().parents[2] / "bench" / "soak.py"


@pytest.fixture
def postgres_installed() -> None:
    if not glob.glob("/usr/lib/postgresql/*/bin/initdb"):
        why = "PostgreSQL is not installed (scripts/postgres.sh start installs it)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{why}: under CI a missing service is a failure")
        pytest.skip(why)


def soak(*args: str) -> tuple[int, str, str]:
    """``bench/soak.py ARGS``; past the limit it is asked to stop (SIGTERM: it tears down its
    servers and its PostgreSQL cluster) before the test fails."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STARFORGE_")}
    proc = subprocess.Popen(
        [sys.executable, str(SOAK), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=500)
    except subprocess.TimeoutExpired:
        proc.terminate()
        out, err = proc.communicate(timeout=60)
        pytest.fail(f"the soak ran past 500 s: {err[-2000:]}")
    return proc.returncode, out, err


def test_a_short_seeded_soak_with_faults_keeps_every_invariant(postgres_installed: None) -> None:
    code, out, err = soak(
        "--minutes", "1", "--faults-per-minute", "6", "--seed", "11", "--no-trl",
        "--settle-s", "240",
    )  # fmt: skip
    assert out.strip(), err[-3000:]
    document = json.loads(out)
    broken = {k: v["details"] for k, v in document["invariants"].items() if not v["held"]}
    assert not broken, json.dumps(broken, indent=1)[-4000:]
    assert code == 0
    assert document["faults"]["total"] >= 3, document["timeline"]
    assert document["workload"]["runs"] >= 5
    assert document["invariants"]["no_log_line_lost_or_doubled"]["details"]["step_lines"] > 0
