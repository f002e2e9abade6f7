"""The local executor's warm runner: a start forked from it is the runner a fresh interpreter
would have been (session, group, cwd, environment, descriptors, log, exit), and a warm process
that is gone never costs a start."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from starforge.server.executors.local import LocalExecutor, WarmRunner, parse_ref, proc_state

from .factories import eventually

TARGET = "tests.server.warm_target"


# The runners each test started: they outlive the warm process by design, so the fixture ends
# those still alive, even when the test failed before it ended them itself.
_started: list[str] = []


@pytest.fixture
def warm() -> Iterator[LocalExecutor]:
    local = LocalExecutor([sys.executable, "-m", TARGET])
    yield local
    for ref in _started:
        if local.is_alive(ref):
            local.kill(ref)
            eventually(lambda ref=ref: not local.is_alive(ref), what="the kill at teardown")
    _started.clear()
    local.close()


def start(local: LocalExecutor, tmp_path: Path, mode: str, name: str = "") -> tuple[str, Path]:
    folder = tmp_path / (name or mode)
    folder.mkdir()
    binding = folder / "binding.json"
    binding.write_text(mode)
    ref = local.start(binding, folder / "logs" / "node-0.log")
    _started.append(ref)
    return ref, binding


def first_line(log: Path) -> dict[str, Any]:
    eventually(lambda: log.exists() and "\n" in log.read_text(), what="the runner's first line")
    return dict(json.loads(log.read_text().splitlines()[0]))


def log_of(binding: Path) -> Path:
    return binding.parent / "logs" / "node-0.log"


def warm_pid(local: LocalExecutor) -> int | None:
    proc = local._warm._proc if local._warm is not None else None
    return proc.pid if proc is not None and proc.poll() is None else None


def test_a_warm_started_runner_starts_as_a_fresh_one_would(
    warm: LocalExecutor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before, _ = start(warm, tmp_path, "sleep", name="before")  # the warm process exists now
    monkeypatch.setenv("STARFORGE_WARM_PROBE", "set after the warm process started")
    ref, binding = start(warm, tmp_path, "sleep")
    seen = first_line(log_of(binding))
    pid = parse_ref(ref)
    assert warm_pid(warm) not in (None, pid)  # forked by the warm process, not started fresh
    assert seen["name"] == "__main__" and seen["argv"] == [str(binding)]
    assert seen["pid"] == seen["pgid"] == seen["sid"] == pid  # its own session and group
    assert seen["cwd"] == str(binding.parent)
    assert seen["probe"] == "set after the warm process started"  # the server's env of now
    assert seen["stdin"] == os.devnull
    # The imports are frozen: a collection in the runner copies none of the warm pages
    # (bench/runner_fork.py measures what that saves).
    assert seen["frozen"] > 1000
    assert seen["fds"][:3] == [0, 1, 2] and len(seen["fds"]) == 4  # + the listing's own
    assert warm.is_alive(ref)
    warm.stop(ref, grace_s=60)
    eventually(lambda: not warm.is_alive(ref), what="SIGTERM to end the runner")
    warm.kill(before)  # a test ends every process it started
    eventually(lambda: not warm.is_alive(before), what="the kill")


def test_a_warm_started_runner_ends_like_a_fresh_one_and_leaves_no_zombie(
    warm: LocalExecutor, tmp_path: Path
) -> None:
    ref, binding = start(warm, tmp_path, "exit")
    eventually(lambda: not warm.is_alive(ref), what="the runner to exit")
    lines = log_of(binding).read_text().splitlines()
    assert lines[-1] == "a non-daemon thread ended"  # the exit waited for it
    assert proc_state(parse_ref(ref)) is None  # reaped

    ref, binding = start(warm, tmp_path, "raise")
    eventually(lambda: not warm.is_alive(ref), what="the runner to fail")
    text = log_of(binding).read_text()
    assert "Traceback" in text and "RuntimeError: the runner broke" in text


def test_a_dead_warm_process_costs_no_start_and_is_replaced(
    warm: LocalExecutor, tmp_path: Path
) -> None:
    start(warm, tmp_path, "exit", name="first")
    dead = warm_pid(warm)
    assert dead is not None
    os.kill(dead, signal.SIGKILL)
    eventually(lambda: warm_pid(warm) is None, what="the warm process to die")

    ref, binding = start(warm, tmp_path, "sleep", name="fresh")  # a fresh start or a new warm
    assert first_line(log_of(binding))["pgid"] == parse_ref(ref)
    again, binding = start(warm, tmp_path, "sleep", name="warm-again")
    assert first_line(log_of(binding))["pgid"] == parse_ref(again)
    assert warm_pid(warm) not in (None, dead)
    for r in (ref, again):
        warm.kill(r)
        eventually(lambda r=r: not warm.is_alive(r), what="the kill")


def test_runners_outlive_the_warm_process_that_forked_them(
    warm: LocalExecutor, tmp_path: Path
) -> None:
    ref, binding = start(warm, tmp_path, "sleep")
    first_line(log_of(binding))
    forked_by = warm_pid(warm)
    warm.close()  # the server went away
    assert forked_by is not None and proc_state(forked_by) is None
    assert warm.is_alive(ref)
    warm.kill(ref)
    eventually(lambda: not warm.is_alive(ref), what="the kill")


def test_a_warm_process_that_never_gets_ready_costs_its_start_a_fresh_runner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STARFORGE_WARM_TRAINER_PRELOAD", "tests.server.hangs_at_import")
    stuck = WarmRunner(
        [sys.executable, "-m", "starforge.runner.warm", "--trainer", TARGET], ready_timeout_s=1.0
    )
    folder = tmp_path / "sleep"
    folder.mkdir()
    (folder / "binding.json").write_text("sleep")
    try:
        assert stuck.start(folder / "binding.json", folder / "node-0.log") is None
        assert stuck._proc is None  # killed: it had read nothing, so it started nothing
        assert not (folder / "node-0.log").exists()
    finally:
        stuck.close()
