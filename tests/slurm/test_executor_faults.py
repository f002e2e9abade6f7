"""Faults on the real Slurm cluster: bad settings, sbatch refusing, a node going down under a run,
and ``kill -9`` of the control plane while a Slurm job runs."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from starforge.cli.main import main
from starforge.client import config
from starforge.project.lab import Lab
from tests.conftest import Result
from tests.slurm.conftest import SCRIPT, SlurmCluster, wait_for
from tests.slurm.starforge_on_slurm import (
    FINAL,
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
SETTINGS = {
    "heartbeat_s": 0.5,
    "lost_after_s": 6,
    "profiles": [
        {"name": "h200", "series": "h200", "gpus_per_node": 8, "nodes": 1},
        {"name": "h100", "series": "h100", "gpus_per_node": 8, "nodes": 1},
        {"name": "a100", "series": "a100", "gpus_per_node": 8, "nodes": 1},
    ],
    # h100 runs ask Slurm for a GRES type it does not have: sbatch refuses them.
    "slurm": {"partitions": {"h100": {"partition": "h100", "gres_type": "h999"}}},
}


@pytest.fixture(scope="module")
def server_home(
    slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    with slurm_server(tmp_path_factory.mktemp("sf-slurm-faults"), SETTINGS) as home:
        yield home


@pytest.fixture
def sf_home(server_home: Path) -> Path:
    return server_home


def runs(sf: Callable[..., Result]) -> list[str]:
    listed = sf("job", "ls", "--json", "--limit", "1000").json()
    assert isinstance(listed, list)
    return sorted(str(r["run_id"]) for r in listed)


def test_a_series_without_a_partition_is_rejected_naming_the_series_and_the_setting(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = custom_lab(new_lab, steps=1)
    before = runs(sf)
    got = sf("submit", "c", "--profile", "a100:1", "--image", "r.example/t:1", cwd=lab.root)
    assert got.code == 2
    assert "GPU series 'a100' has no Slurm partition" in got.err
    assert "slurm.partitions" in got.err
    assert runs(sf) == before  # nothing created


def test_sbatch_refusing_ends_the_attempt_startup_failed_with_slurms_own_message(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = custom_lab(new_lab, steps=1)
    run_id = submit(sf, lab, "h100:1", exp="c")
    done = wait_status(sf, run_id, *FINAL)
    assert (done["status"], done["end_reason"]) == ("failed", "startup_failed")
    shown = sf("job", "status", run_id).out
    assert "sbatch failed" in shown and "Requested node configuration is not available" in shown, (
        shown
    )
    assert "sbatch failed" in logs_of(done)
    assert done["attempts"][0]["executor_ref"] is None  # no Slurm job was made


def test_a_node_set_down_under_a_run_is_node_lost_and_the_auto_retry_runs_on_the_other_node(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = custom_lab(new_lab, steps=60)
    run_id = submit(sf, lab, "h200:8", exp="c")
    wait_log(sf, run_id, r"\[checkpoint\] \S+step-5")
    [job] = job_ids(view(sf, run_id))
    node = slurm_jobs(job)[0]["nodes"]
    other = {"h200-1": "h200-2", "h200-2": "h200-1"}[node]
    try:
        scontrol("update", f"nodename={node}", "state=down", "reason=starforge-test")
        scontrol("update", f"nodename={node}", "state=drain", "reason=starforge-test")
        done = wait_status(sf, run_id, "succeeded", "failed", deadline_s=120)
    finally:
        scontrol("update", f"nodename={node}", "state=resume")
        if view(sf, run_id)["status"] not in FINAL:  # a failed assertion holds no GPUs after it
            sf("job", "stop", run_id)
    first, second = done["attempts"]
    assert first["end_reason"] == "node_lost", logs_of(done)
    assert done["status"] == "succeeded", logs_of(done, 2)
    assert slurm_jobs(job_ids(done)[1])[0]["nodes"] == other
    assert second["resumed_from"] and steps_in(logs_of(done, 2))[-1] == 60


def test_kill_9_of_the_control_plane_while_a_slurm_job_runs_loses_nothing_and_runs_it_once(
    sf: Callable[..., Result], new_lab: Callable[..., Lab], server_home: Path
) -> None:
    lab = custom_lab(new_lab, steps=50)
    run_id = submit(sf, lab, "h200:1", exp="c")
    wait_log(sf, run_id, r"step 3/")
    info = config.read_server_file(server_home)
    assert info is not None
    os.kill(int(str(info["pid"])), signal.SIGKILL)
    log = next(Path(view_dir(server_home, run_id)).glob("logs/attempt-1.log"))
    wait_for(lambda: "step 10/" in log.read_text(), "training to go on without a server")
    assert main(["server", "start"]) == 0

    done = wait_status(sf, run_id, *FINAL, deadline_s=180)
    text = logs_of(done)
    assert done["status"] == "succeeded", text
    assert len(done["attempts"]) == 1
    assert [e["dst"] for e in done["events"]].count("starting") == 1
    assert steps_in(text) == list(range(1, 51))  # the log is whole: every step once, in order
    out = subprocess.run(["squeue", "--json"], capture_output=True, text=True, check=True).stdout
    assert out.count(f'"sf.{run_id}.') == 1  # one Slurm job for the run, ever


def view_dir(home: Path, run_id: str) -> str:
    return next(str(p) for p in (home / "storage" / "runs").glob(f"*/*/*/{run_id}"))


def scontrol(*args: str) -> None:
    subprocess.run(["scontrol", *args], check=True, capture_output=True)


def test_slurmctld_stopped_and_started_under_queued_and_running_runs_loses_and_repeats_nothing(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = custom_lab(new_lab, steps=40)
    running = submit(sf, lab, "h200:1", exp="c")
    wait_log(sf, running, r"step 3/")
    state = Path(os.environ.get("STARFORGE_SLURM_DIR", "/var/tmp/starforge-slurm"))
    os.kill(int((state / "run" / "slurmctld.pid").read_text()), signal.SIGTERM)
    try:
        wait_for(lambda: not controller_answers(), "slurmctld to stop answering")
        status = sf("status")  # says so, instead of a capacity it cannot read
        assert status.code == 0 and "Slurm is unreachable" in status.out, status.out
        cluster: Any = sf("status", "--json").json()
        assert cluster["cluster"]["unreachable"].startswith("Slurm is unreachable")
        waiting = submit(sf, lab, "h200:1", exp="c")  # queued while Slurm cannot place it
        log = Path(view(sf, running)["run_dir"], "logs", "attempt-1.log")
        wait_for(lambda: "step 15/" in log.read_text(), "training to go on without slurmctld")
        assert view(sf, waiting)["status"] == "queued"
    finally:
        subprocess.run(["bash", str(SCRIPT), "start"], check=True, capture_output=True)
    assert "unreachable" not in sf("status").out  # it answers again
    for run_id in (running, waiting):
        done = wait_status(sf, run_id, *FINAL, deadline_s=120)
        assert done["status"] == "succeeded", logs_of(done)
        assert len(done["attempts"]) == 1
        assert steps_in(logs_of(done)) == list(range(1, 41))


def controller_answers() -> bool:
    return subprocess.run(["scontrol", "ping"], capture_output=True, check=False).returncode == 0
