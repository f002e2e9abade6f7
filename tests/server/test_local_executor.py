"""The local executor with real processes: process groups, logs, stop, reaping, old pids."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from starforge.contract.errors import StarForgeError
from starforge.server.executors.base import Executor, SupportsAdopt, SupportsKill, SupportsReap
from starforge.server.executors.local import LocalExecutor, parse_ref, proc_state

from .factories import eventually

RUNNER = """
import os, signal, sys, time
mode = open(sys.argv[1]).read().strip()
if mode == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print(f"pid={os.getpid()} pgid={os.getpgid(0)} mode={mode}", flush=True)
if mode == "exit":
    sys.exit(0)
while True:
    time.sleep(0.05)
"""


@pytest.fixture
def local(tmp_path: Path) -> LocalExecutor:
    script = tmp_path / "runner.py"
    script.write_text(RUNNER)
    return LocalExecutor([sys.executable, str(script)])


def start(local: LocalExecutor, tmp_path: Path, mode: str) -> tuple[str, Path]:
    binding = tmp_path / f"{mode}.binding.json"
    binding.write_text(mode)
    log = tmp_path / "logs" / f"{mode}.log"
    return local.start(binding, log), log


def test_a_runner_leads_its_own_process_group_and_writes_its_log(
    local: LocalExecutor, tmp_path: Path
) -> None:
    ref, log = start(local, tmp_path, "exit")
    pid = parse_ref(ref)
    eventually(lambda: not local.is_alive(ref), what="the runner to exit")
    assert log.read_text().strip() == f"pid={pid} pgid={pid} mode=exit"


def test_a_finished_runner_is_reaped(local: LocalExecutor, tmp_path: Path) -> None:
    ref, _ = start(local, tmp_path, "exit")
    eventually(lambda: not local.is_alive(ref), what="the runner to exit")
    assert proc_state(parse_ref(ref)) is None  # no zombie left


def test_stop_terminates_the_group(local: LocalExecutor, tmp_path: Path) -> None:
    ref, log = start(local, tmp_path, "sleep")
    assert local.is_alive(ref)
    eventually(lambda: "mode=sleep" in log.read_text(), what="the runner to start")
    local.stop(ref, grace_s=60)
    eventually(lambda: not local.is_alive(ref), what="SIGTERM to end the runner")


def test_a_runner_ignoring_sigterm_is_killed_after_the_grace_period(
    local: LocalExecutor, tmp_path: Path
) -> None:
    ref, log = start(local, tmp_path, "ignore-term")
    eventually(lambda: "mode=ignore-term" in log.read_text(), what="the runner to start")
    local.stop(ref, grace_s=0.2)
    eventually(lambda: not local.is_alive(ref), what="SIGKILL after the grace period")


def test_stopping_a_gone_runner_is_harmless(local: LocalExecutor, tmp_path: Path) -> None:
    ref, _ = start(local, tmp_path, "exit")
    eventually(lambda: not local.is_alive(ref), what="the runner to exit")
    local.stop(ref, grace_s=0)


def test_a_runner_started_by_an_earlier_server_is_seen_alive_then_dead(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
    )
    fresh = LocalExecutor([sys.executable])  # holds no handle for this process
    ref = f"local:{proc.pid}"
    try:
        assert fresh.is_alive(ref)
        os.kill(proc.pid, signal.SIGKILL)
        eventually(lambda: proc_state(proc.pid) == "Z", what="the process to become a zombie")
        assert not fresh.is_alive(ref)  # a zombie is dead
    finally:
        proc.kill()
        proc.wait()
    assert not fresh.is_alive(ref)


def test_a_foreign_reference_is_refused() -> None:
    with pytest.raises(StarForgeError):
        parse_ref("slurm:123")


def test_the_local_executor_offers_every_optional_capability_the_reconciler_uses() -> None:
    local = LocalExecutor([sys.executable])
    for capability in (Executor, SupportsKill, SupportsAdopt, SupportsReap):
        assert isinstance(local, capability), capability.__name__


def test_a_reused_pid_is_not_taken_for_the_runner_that_recorded_itself_before_it() -> None:
    from starforge.server.executors import local

    ref = f"{local.PREFIX}{os.getpid()}"
    assert local.started_by_then(ref, datetime.now().timestamp())  # this process started before now
    assert not local.started_by_then(ref, 1.0)  # a runner recorded in 1970 is not this process
