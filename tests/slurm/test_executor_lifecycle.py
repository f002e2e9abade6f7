"""Stop, pause, resume and retry on the real Slurm cluster, and Slurm's reason for a run it holds.

Every attempt is its own Slurm job: a stop or pause ends it (``scancel --signal=TERM``, the job
checkpoints), resume and retry submit a new one that starts from the latest checkpoint.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from starforge.project.lab import Lab
from tests.conftest import Result
from tests.slurm.conftest import FINAL_STATES, SlurmCluster, SlurmDriver, wait_for
from tests.slurm.starforge_on_slurm import (
    FINAL,
    act,
    custom_lab,
    job_ids,
    logs_of,
    slurm_jobs,
    slurm_server,
    steps_in,
    submit,
    view,
    wait_log,
    wait_status,
)

pytestmark = pytest.mark.slurm
SETTINGS = {"heartbeat_s": 0.5, "lost_after_s": 6, "stop_grace_s": 20, "pause_grace_s": 30}


@pytest.fixture(scope="module")
def server_home(
    slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    with slurm_server(tmp_path_factory.mktemp("sf-slurm-life"), SETTINGS) as home:
        yield home


@pytest.fixture
def sf_home(server_home: Path) -> Path:
    return server_home


def test_stop_ends_the_slurm_job_and_retry_continues_in_a_new_job_from_the_checkpoint(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = custom_lab(new_lab, steps=40)
    run_id = submit(sf, lab, "h200:1", exp="c")
    wait_log(sf, run_id, r"\[checkpoint\] \S+step-5")
    act(sf, "stop", run_id)
    stopped = wait_status(sf, run_id, *FINAL)
    assert stopped["status"] == "stopped", logs_of(stopped)
    # Asked to stop (SIGTERM: 143), not killed (SIGKILL would be 137).
    assert stopped["exit_code"] == 143 and "exited with code 143" in logs_of(stopped)
    [first] = job_ids(stopped)
    assert wait_for(lambda: slurm_jobs(first)[0]["job_state"] in FINAL_STATES, "the job to end")

    act(sf, "retry", run_id)
    done = wait_status(sf, run_id, "succeeded", "failed", deadline_s=180)
    second_log = logs_of(done, 2)
    assert done["status"] == "succeeded", second_log
    one, two = job_ids(done)
    assert one == first and two != first
    assert slurm_jobs(two)[0]["name"] == f"sf.{run_id}.2"
    assert "[resume] from" in second_log
    resumed_at = steps_in(second_log)[0]
    assert resumed_at > 5 and steps_in(second_log)[-1] == 40


def test_pause_checkpoints_and_ends_the_job_then_resume_continues_as_a_new_attempt(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = custom_lab(new_lab, steps=40)
    run_id = submit(sf, lab, "h200:2", exp="c")
    wait_log(sf, run_id, r"step 7/")
    act(sf, "pause", run_id)
    paused = wait_status(sf, run_id, "paused", "failed", "succeeded")
    assert paused["status"] == "paused", logs_of(paused)
    [first] = job_ids(paused)
    ended = wait_for(
        lambda: (s := slurm_jobs(first)[0]["job_state"]) in FINAL_STATES and s, "the job to end"
    )
    assert ended in {"COMPLETED", "CANCELLED", "FAILED"}  # no Slurm job holds a paused run

    act(sf, "resume", run_id)
    done = wait_status(sf, run_id, "succeeded", "failed", deadline_s=180)
    log = logs_of(done, 2)
    assert done["status"] == "succeeded", log
    assert done["run_id"] == run_id and len(done["attempts"]) == 2
    assert done["attempts"][1]["resumed_from"], "resume starts from the kept checkpoint"
    assert job_ids(done)[1] != first
    assert steps_in(log)[0] > 7 and steps_in(log)[-1] == 40


def test_a_run_slurm_holds_back_shows_slurms_reason_and_starts_when_slurm_frees_the_gpus(
    sf: Callable[..., Result],
    new_lab: Callable[..., Lab],
    slurm: SlurmDriver,
) -> None:
    # Work StarForge does not know about fills h100-1: StarForge places, Slurm holds the job.
    blocker = slurm.sbatch(
        "-p", "h100", "--gres=gpu:h100:8", "-o", "/dev/null", "--wrap", "sleep 600"
    )
    wait_for(lambda: slurm.state(blocker) == "RUNNING", "the blocker to run")
    lab = custom_lab(new_lab, steps=3)
    run_id = submit(sf, lab, "h100:2", exp="c")
    # Until Slurm's scheduler looked at it the job has no reason yet ("waiting in Slurm").
    held = wait_for(
        lambda: (v := view(sf, run_id))["executor_pending"] == "Resources" and v,
        "Slurm's pending reason",
    )
    assert held["status"] == "starting"
    shown = sf("job", "status", run_id)
    assert "waiting: Resources" in shown.out
    listed = sf("job", "ls")
    assert "(Slurm: " in listed.out  # the table says Slurm holds it (cut to one line)
    [row] = [r for r in sf("job", "ls", "--json").json() if r["run_id"] == run_id]  # type: ignore[union-attr]
    assert row["executor_pending"] == "Resources"

    subprocess.run(["scancel", blocker], check=True)
    done = wait_status(sf, run_id, *FINAL)
    assert done["status"] == "succeeded", logs_of(done)
    assert done["executor_pending"] == ""
