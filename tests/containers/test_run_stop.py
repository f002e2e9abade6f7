"""Stopping a containerized run, the way the local executor does: no container is left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from starforge.contract.layout import RunLayout
from tests.containers.conftest import containers_named, make_image, make_run

pytestmark = [pytest.mark.containers, pytest.mark.usefixtures("podman")]

SCRIPT = (
    'test -f "$PYTHONPATH/starforge/report/__init__.py" && echo report-mounted\n'
    "trap 'echo got-term; exit 0' TERM\n"
    "echo started\n"
    "while true; do sleep 1; done\n"
)


def wait_for(check: object, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.fixture
def runners() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Runners started by a test; a failed test's are killed (their watchdog removes the
    container)."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for runner in started:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
            runner.wait()


def start(
    tmp_path: Path, runners: list[subprocess.Popen[bytes]]
) -> tuple[subprocess.Popen[bytes], RunLayout, str]:
    bp = make_run(tmp_path, SCRIPT, image=make_image({}))
    runner = subprocess.Popen(
        [sys.executable, "-m", "starforge.runner", str(bp)], start_new_session=True
    )
    runners.append(runner)
    layout = RunLayout(bp.parent.parent)
    log = layout.log(1)
    wait_for(lambda: log.is_file() and "started" in log.read_text(), "the job to start")
    name = f"sf-{json.loads(bp.read_text())['run_id']}-1-0"
    assert containers_named(name) == [name]
    return runner, layout, name


def test_a_stopped_run_ends_its_job_and_leaves_no_container(tmp_path: Path, runners: list) -> None:
    runner, layout, name = start(tmp_path, runners)
    os.killpg(runner.pid, signal.SIGTERM)  # the executor's stop: the runner's whole group
    assert runner.wait(timeout=60) == 0
    log = layout.log(1).read_text()
    assert "report-mounted" in log and "got-term" in log
    assert containers_named(name) == []


def test_a_runner_killed_outright_leaves_no_container(tmp_path: Path, runners: list) -> None:
    runner, _, name = start(tmp_path, runners)
    os.killpg(runner.pid, signal.SIGKILL)  # the executor's force after the grace
    runner.wait(timeout=60)
    wait_for(lambda: containers_named(name) == [], "the container to be removed")
