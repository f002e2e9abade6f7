"""Per-run uids (runner/uids.py): never two live runs on one uid, one uid per attempt."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from starforge.contract.errors import RunnerError
from starforge.runner import jobuser, uids

FIRST, LAST = 64100, 64103  # a corner of the default range no test process runs under
# The one test that starts a process under a uid of its range takes a corner of its own: xdist
# runs it beside the others, which would see that uid busy and skip it.
BUSY_FIRST, BUSY_LAST = 64110, 64113


def test_two_attempts_take_two_uids_and_the_nodes_of_one_attempt_share_its_uid(
    tmp_path: Path,
) -> None:
    a = uids.take(tmp_path, FIRST, LAST, "r-a", 1)
    b = uids.take(tmp_path, FIRST, LAST, "r-b", 1)
    assert (a, b) == (FIRST, FIRST + 1)
    assert uids.take(tmp_path, FIRST, LAST, "r-a", 1) == a  # node 1 of r-a's attempt 1
    assert uids.take(tmp_path, FIRST, LAST, "r-a", 2) == FIRST + 2  # its next attempt: anew
    assert oct((tmp_path / "uids").stat().st_mode & 0o777) == "0o700"


def test_a_full_range_is_refused_naming_the_setting(tmp_path: Path) -> None:
    for n in range(4):
        uids.take(tmp_path, FIRST, LAST, f"r-{n}", 1)
    with pytest.raises(RunnerError, match="every uid of the range 64100-64103") as caught:
        uids.take(tmp_path, FIRST, LAST, "r-late", 1)
    assert "job_uid_range" in (caught.value.hint or "")


def test_a_uid_whose_runner_died_is_taken_again_once_none_of_its_processes_runs(
    tmp_path: Path,
) -> None:
    uids.take(tmp_path, FIRST, LAST, "r-dead", 1)
    holder = tmp_path / "uids" / str(FIRST)
    dead = subprocess.Popen(["true"])
    dead.wait()
    holder.write_text(json.dumps({"run_id": "r-dead", "attempt": 1, "pid": dead.pid}))
    assert uids.take(tmp_path, FIRST, LAST, "r-new", 1) == FIRST
    assert json.loads(holder.read_text())["run_id"] == "r-new"


@pytest.mark.skipif(os.geteuid() != 0, reason="only root starts a process under another uid")
def test_a_uid_is_not_given_back_or_taken_while_a_process_of_it_runs(tmp_path: Path) -> None:
    uid = uids.take(tmp_path, BUSY_FIRST, BUSY_LAST, "r-a", 1)
    stray = subprocess.Popen(["sleep", "600"], user=uid, group=uid)
    try:
        assert uids.uid_has_processes(uid)
        assert not uids.give_back(tmp_path, uid, "r-a", 1)  # a node of it still runs
        holder = tmp_path / "uids" / str(uid)
        holder.write_text(json.dumps({"run_id": "r-a", "attempt": 1, "pid": 0}))  # runner gone
        assert uids.take(tmp_path, BUSY_FIRST, BUSY_LAST, "r-b", 1) == uid + 1  # its job still runs
    finally:
        stray.kill()
        stray.wait()
    assert not uids.uid_has_processes(uid)
    assert uids.take(tmp_path, BUSY_FIRST, BUSY_LAST, "r-c", 1) == uid  # now it is free again
    assert not uids.give_back(tmp_path, uid, "r-a", 1)  # not r-a's any more
    assert uids.give_back(tmp_path, uid, "r-c", 1)
    assert not (tmp_path / "uids" / str(uid)).exists()


def test_a_program_the_runs_uid_cannot_reach_is_refused_naming_the_fix(tmp_path: Path) -> None:
    closed = tmp_path / "home"
    (closed / "bin").mkdir(parents=True)
    program = closed / "bin" / "python"
    program.write_text("")
    program.chmod(0o755)
    closed.chmod(0o700)  # like /root, where this machine's default Python lives
    run_uid = jobuser.dynamic(64100, 64600)
    with pytest.raises(RunnerError) as caught:
        jobuser.check_runnable(run_uid, str(program), "")
    assert f"cannot run the job's program {program}" in caught.value.message
    assert "/usr/bin/python3" in (caught.value.hint or "")
    jobuser.check_runnable(run_uid, "sh", "/usr/bin:/bin")  # a program every user may run
