"""A runner on Slurm that cannot reach its server: the attempt fails ``startup_failed`` naming the
URL, and by the time StarForge says the run ended, Slurm has let go of its nodes.

The lab's issue (W11b, W11c in its audit) ran Slurm: runners on the compute nodes were given an
address they could not reach, runs ended with no sign of why, and ``sf status`` showed nodes free
that Slurm still held. Here the server's ``url:`` (what runners call back) is a port nothing
listens on; the user's ``sf`` reaches the server at the address it listens on.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from starforge.project.lab import Lab
from tests.conftest import Result
from tests.integration.conftest import stop_every_run
from tests.slurm.conftest import FINAL_STATES, SlurmCluster, wait_for
from tests.slurm.starforge_on_slurm import (
    FINAL,
    custom_lab,
    job_ids,
    slurm_jobs,
    submit,
    wait_status,
)

pytestmark = pytest.mark.slurm


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


NOWHERE = f"http://127.0.0.1:{free_port()}"  # a port nothing listens on


@pytest.fixture(scope="module")
def served(
    slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """``python -m starforge.server`` on Slurm, listening on a port of its own while its ``url:``
    (what runners are given, and what server.json names) is NOWHERE: (its address, its token)."""
    home = tmp_path_factory.mktemp("sf-slurm-unreachable")
    # A short heartbeat keeps the runner's patience at its start short.
    settings = {
        "executor": "slurm",
        "devices": "cpu",
        "cpu_processes_per_node": 1,
        "url": NOWHERE,
        "heartbeat_s": 0.2,
    }
    (home / "server.yaml").write_text(yaml.safe_dump(settings))
    port = free_port()
    cmd = [sys.executable, "-m", "starforge.server", "--home", str(home), "--port", str(port)]
    with (home / "server.out").open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        token = home / "server" / "local-token"

        def up_or_dead() -> bool:
            started = (home / "server" / "server.json").exists() and token.exists()
            return started or proc.poll() is not None

        wait_for(up_or_dead, "the server to start")
        assert proc.poll() is None, (home / "server.out").read_text()
        url = f"http://127.0.0.1:{port}"
        yield url, token.read_text().strip()
        saved = {k: os.environ.get(k) for k in ("STARFORGE_SERVER", "STARFORGE_TOKEN")}
        os.environ.update(STARFORGE_SERVER=url, STARFORGE_TOKEN=token.read_text().strip())
        try:
            stop_every_run()  # runners outlive their server by design: none may outlive this
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    finally:
        proc.terminate()
        proc.wait(timeout=60)


@pytest.fixture
def sf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, served: tuple[str, str]) -> Path:
    """The user's own home, talking to that server by its address and token."""
    monkeypatch.setenv("STARFORGE_HOME", str(tmp_path / "sf-home"))
    monkeypatch.setenv("STARFORGE_SERVER", served[0])
    monkeypatch.setenv("STARFORGE_TOKEN", served[1])
    return tmp_path / "sf-home"


def free_h200(sf: Callable[..., Result]) -> int:
    status: Any = sf("status", "--json").json()
    [h200] = [s for s in status["cluster"]["series"] if s["series"] == "h200"]
    return int(h200["free"])


def test_a_runner_that_cannot_reach_its_server_fails_the_attempt_and_slurm_has_freed_its_nodes(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = custom_lab(new_lab, steps=2)
    run_id = submit(sf, lab, "h200:16", exp="c")
    done = wait_status(sf, run_id, *FINAL, deadline_s=180)
    # Slurm's view at the moment StarForge says the run ended: its job no longer holds nodes.
    [job] = job_ids(done)
    held = [r for r in slurm_jobs(job) if r["job_state"] not in FINAL_STATES]
    assert held == [], held
    assert free_h200(sf) == 16
    assert (done["status"], done["end_reason"]) == ("failed", "startup_failed"), done
    reason = str(done["reason"])
    assert f"cannot reach the StarForge server at {NOWHERE}" in reason, reason
    log = sf("job", "logs", run_id, "-n", "0", "--no-follow").out
    assert "startup failed: the control plane cannot be reached" in log, log
