"""The Slurm tests' cluster: the real one that ``scripts/slurm.sh`` runs on this machine.

``slurm_cluster`` (session) makes sure the cluster answers ``sinfo --json``. When it does not, the
fixture starts it with the script; where a Slurm test must never skip (CI, or the README's test
command, which starts the cluster itself and sets ``STARFORGE_REQUIRE_SLURM=1``) an unreachable
cluster is a failure, elsewhere (a laptop without root) the test is skipped with the reason.

``slurm`` (per test) hands out a small driver for plain Slurm commands (sbatch, squeue,
scontrol) and cancels, at the end of the test, whatever job the test left behind, so one failing
test does not hold GPUs that the next one waits for.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "slurm.sh"
# A job on the idle test cluster starts within about a second; other engineers' jobs and a busy
# 2-core machine can stretch that, never to this.
JOB_DEADLINE_S = 90.0
# Squeue/scontrol states a job never leaves (see `man squeue`, JOB STATE CODES).
FINAL_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "TIMEOUT",
    }
)


def must_not_skip() -> bool:
    """True where a Slurm test that cannot reach the cluster fails instead of skipping."""
    return os.environ.get("CI", "").lower() == "true" or bool(
        os.environ.get("STARFORGE_REQUIRE_SLURM")
    )


def run(args: list[str], timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)


def sinfo_nodes() -> list[dict[str, Any]] | None:
    """The cluster's nodes as ``sinfo --json`` reports them, or None when it does not answer."""
    try:
        done = run(["sinfo", "--json"], timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return list(json.loads(done.stdout)["nodes"])


@dataclass(frozen=True)
class SlurmCluster:
    """The running cluster as the tests found it: node name → (partitions, gres)."""

    nodes: dict[str, tuple[list[str], str]]


@pytest.fixture(scope="session")
def slurm_cluster() -> SlurmCluster:
    nodes = sinfo_nodes()
    if nodes is None:
        try:
            started = run(["bash", str(SCRIPT), "start"], timeout=600)
            problem = started.stdout + started.stderr
        except (OSError, subprocess.TimeoutExpired) as e:
            problem = str(e)
        nodes = sinfo_nodes()
        if nodes is None:
            why = f"`sinfo --json` does not answer, even after `scripts/slurm.sh start`: {problem}"
            if must_not_skip():
                pytest.fail(why)
            pytest.skip(why)
    return SlurmCluster(
        nodes={str(n["name"]): (list(n["partitions"]), str(n["gres"])) for n in nodes}
    )


@dataclass
class SlurmDriver:
    """Plain Slurm commands for a test; remembers every job it submitted."""

    job_ids: list[str] = field(default_factory=list)

    def sbatch(self, *args: str) -> str:
        """Submit with ``sbatch --parsable``; the job id. Fails the test on Slurm's own message."""
        done = run(["sbatch", "--parsable", *args])
        assert done.returncode == 0, f"sbatch {' '.join(args)} failed: {done.stderr.strip()}"
        job_id = done.stdout.strip().split(";")[0]
        self.job_ids.append(job_id)
        return job_id

    def state(self, job_id: str) -> str:
        """The job's state (PENDING, RUNNING, COMPLETED, …) from ``scontrol show job``."""
        done = run(["scontrol", "show", "job", "--oneliner", job_id])
        assert done.returncode == 0, done.stderr
        fields = dict(kv.split("=", 1) for kv in done.stdout.split() if "=" in kv)
        return fields["JobState"]

    def wait_final(self, job_id: str, deadline_s: float = JOB_DEADLINE_S) -> str:
        """Wait (bounded) until the job reached a final state; that state."""

        def final_state() -> str:
            state = self.state(job_id)
            return state if state in FINAL_STATES else ""

        return wait_for(final_state, f"job {job_id} to end", deadline_s)

    def cancel_leftovers(self) -> None:
        if self.job_ids:
            run(["scancel", *self.job_ids])


def wait_for(check: Callable[[], T], what: str, deadline_s: float = JOB_DEADLINE_S) -> T:
    """Poll ``check`` until it returns something truthy (that value); fail after the deadline."""
    end = time.monotonic() + deadline_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > end:
            pytest.fail(f"timed out after {deadline_s:.0f}s waiting for {what}")
        time.sleep(0.1)


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster) -> Iterator[SlurmDriver]:
    driver = SlurmDriver()
    yield driver
    driver.cancel_leftovers()
