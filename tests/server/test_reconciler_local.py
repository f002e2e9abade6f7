"""What the reconciler needs from the local executor, with real processes: killing what a lost
runner left running in its group, and adopting a runner from its own record."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from starforge.server.executors.local import LocalExecutor, parse_ref, pid_alive

from .factories import eventually, group_exists

# A "runner" that starts a "training" child in its own group, then waits.
RUNNER = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open(sys.argv[1] + ".child", "w").write(str(child.pid))
while True:
    time.sleep(0.05)
"""


@pytest.fixture
def local(tmp_path: Path) -> LocalExecutor:
    script = tmp_path / "runner.py"
    script.write_text(RUNNER)
    return LocalExecutor([sys.executable, str(script)])


def test_the_training_of_a_runner_killed_with_sigkill_lives_on_until_its_group_is_killed(
    local: LocalExecutor, tmp_path: Path
) -> None:
    binding = tmp_path / "b.json"
    binding.write_text("{}")
    ref = local.start(binding, tmp_path / "log.txt")
    pgid = parse_ref(ref)
    child_file = Path(str(binding) + ".child")
    eventually(lambda: child_file.exists() and child_file.read_text() != "", what="the child")
    child = int(child_file.read_text())
    os.kill(pgid, signal.SIGKILL)  # the runner alone, as `kill -9 <runner pid>` does
    eventually(lambda: not local.is_alive(ref), what="the runner to die")
    assert pid_alive(child)  # its training is an orphan that still holds the GPUs
    local.kill(ref)
    eventually(lambda: not group_exists(pgid), what="the whole group to be gone")


def test_a_runner_record_of_a_live_group_leader_is_adopted(tmp_path: Path) -> None:
    executor = LocalExecutor([sys.executable])
    me = os.getpid()
    assert executor.adopt({"pid": me, "pgid": me}) == f"local:{me}"
    assert executor.adopt({"pid": me, "pgid": me + 1}) is None  # not a group leader: not ours
    assert executor.adopt({"pid": 2**22 + 7, "pgid": 2**22 + 7}) is None  # no such process
    assert executor.adopt({"pid": "x"}) is None
