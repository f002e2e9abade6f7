"""Maintenance drain through the services: what can resume is paused (the pause path), what
cannot is reported, dispatch stops while submissions still queue, and resume requeues in order."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from starforge.contract.states import JobStatus
from starforge.server.executors.local import LocalExecutor
from starforge.server.executors.slurm import SlurmError
from starforge.server.runtime import Runtime, build_runtime
from starforge.server.services.access import users
from starforge.server.services.labops import maintenance
from starforge.server.services.runs import jobs
from starforge.server.services.scheduling import dispatch
from starforge.server.settings import Settings

from .factories import (
    TOKENS,
    FakeExecutor,
    eventually,
    member,
    report,
    run_row,
    running_run,
    schedule,
    submit,
)


class HoldingExecutor(FakeExecutor):
    """Slurm as the server sees it (a cluster is outside the project): the attempts it runs."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[tuple[str, int], str] = {}

    def live_attempts(self) -> dict[tuple[str, int], str]:
        return dict(self.live)


@pytest.fixture
def executor() -> HoldingExecutor:
    return HoldingExecutor()


@pytest.fixture
def admin(rt: Runtime) -> users.Caller:
    with rt.transaction() as session:
        users.make_admin(session, "alice")
        return users.authenticate(session, "Bearer alice-token")


def with_checkpoint(rt: Runtime, run_id: str, step: int = 5) -> None:
    folder = dispatch.run_dir_of(rt, run_row(rt, run_id)) / "out" / "checkpoints"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"step-{step}").write_text(f"step={step}\n")


def refs(rt: Runtime, run_id: str) -> list[str]:
    """The executor's references of the runners of the run's latest attempt."""
    nodes = run_row(rt, run_id).attempts[-1].node_records().values()
    return [n.ref for n in nodes if n.ref]


def exits(rt: Runtime, executor: FakeExecutor, run_id: str, code: int) -> None:
    """The run's runner reports its exit, and its process ends."""
    report(rt, run_id, "exited", exit_code=code)
    for ref in refs(rt, run_id):
        executor.die(ref)


def test_drain_pauses_what_can_resume_reports_the_blocker_and_resume_requeues_in_order(
    rt: Runtime, admin: users.Caller, executor: FakeExecutor
) -> None:
    first = running_run(rt, user="alice", profiles=["h200:8"])
    second = running_run(rt, user="bob", profiles=["h200:8"])
    blocker = running_run(rt, user="bob", profiles=["h100:8"])
    with_checkpoint(rt, first)
    with_checkpoint(rt, second)

    drained = maintenance.drain(rt, admin, "driver upgrade")
    assert drained.active and drained.paused == [first, second]
    assert drained.pausing == [first, second]  # still saving their checkpoints
    assert [(b.run_id, b.why) for b in drained.blockers] == [
        (
            blocker,
            "no checkpoint yet: pausing it would restart its training from the beginning; "
            "the drain pauses it once it saves one",
        )
    ]
    assert not drained.safe_to_restart
    assert run_row(rt, blocker).status == JobStatus.RUNNING  # never paused or killed
    assert {run_row(rt, r).status for r in (first, second)} == {JobStatus.PAUSING}

    # Submissions still queue, and wait with the drain's reason.
    queued = submit(rt, "bob", profiles=["h100:1"]).run_id
    assert schedule(rt) == []
    assert jobs.get(rt, member("bob"), queued).reason.startswith("maintenance (driver upgrade): ")

    for run_id in (first, second):
        exits(rt, executor, run_id, 143)  # the checkpoint is saved, the job exits
        assert run_row(rt, run_id).status == JobStatus.PAUSED
    exits(rt, executor, blocker, 0)  # the blocker finished on its own
    status = maintenance.status(rt)
    assert (status.pausing, status.blockers, status.safe_to_restart) == ([], [], True)

    # The drain lives in the database: a restarted server still holds dispatch.
    again = build_runtime(rt.settings, executor=FakeExecutor())
    assert maintenance.status(again).active
    again.engine.dispose()

    after = maintenance.resume(rt, admin)
    assert not after.active and after.message.startswith("maintenance over: 2 paused run(s)")
    assert schedule(rt) == [first, second, queued]  # their old order, then the newcomer
    assert [len(run_row(rt, r).attempts) for r in (first, second)] == [2, 2]


def test_resume_without_a_drain_changes_nothing(rt: Runtime, admin: users.Caller) -> None:
    run_id = submit(rt, "bob", profiles=["h100:1"]).run_id
    assert not maintenance.resume(rt, admin).active
    assert schedule(rt) == [run_id]


def test_a_blocker_that_saves_a_checkpoint_is_paused_by_the_next_pass_and_resumed_after(
    rt: Runtime, admin: users.Caller, executor: FakeExecutor
) -> None:
    blocker = running_run(rt, user="bob", profiles=["h100:8"])
    assert maintenance.drain(rt, admin, "kernel").paused == []
    assert maintenance.pause_resumable(rt) == []  # still nothing to resume from
    with_checkpoint(rt, blocker)  # it saves one after the drain began
    assert maintenance.pause_resumable(rt) == [blocker]  # the reconciler's next tick
    assert maintenance.pause_resumable(rt) == []  # once
    status = maintenance.status(rt)
    assert (status.paused, status.pausing, status.blockers) == ([blocker], [blocker], [])
    exits(rt, executor, blocker, 143)
    assert maintenance.status(rt).safe_to_restart
    maintenance.resume(rt, admin)
    assert schedule(rt) == [blocker]


def test_no_drain_pauses_nothing(rt: Runtime) -> None:
    run_id = running_run(rt, user="bob", profiles=["h100:8"])
    with_checkpoint(rt, run_id)
    assert maintenance.pause_resumable(rt) == []
    assert run_row(rt, run_id).status == JobStatus.RUNNING


# ---- what the executor still holds -----------------------------------------------------------


def paused_by_the_drain(rt: Runtime, admin: users.Caller) -> str:
    """A run the drain paused and the database calls ``paused``: its runner said it exited."""
    run_id = running_run(rt, user="bob", profiles=["h100:8"])
    with_checkpoint(rt, run_id)
    assert maintenance.drain(rt, admin, "kernel").paused == [run_id]
    report(rt, run_id, "exited", exit_code=143)
    assert run_row(rt, run_id).status == JobStatus.PAUSED
    return run_id


def test_a_paused_run_whose_runner_still_runs_is_not_safe_to_restart(
    rt: Runtime, admin: users.Caller, executor: FakeExecutor
) -> None:
    run_id = paused_by_the_drain(rt, admin)
    (ref,) = refs(rt, run_id)  # still alive: it outlived its attempt's end

    status = maintenance.status(rt)
    assert not status.safe_to_restart
    assert [(b.run_id, b.why) for b in status.blockers] == [
        (run_id, f"paused in the database, but its runner still runs ({ref})")
    ]
    assert (
        status.message
        == "not safe to restart yet: 0 run(s) still saving a checkpoint, 1 blocker(s)"
    )

    executor.die(ref)
    assert maintenance.status(rt).safe_to_restart


def test_an_executor_that_cannot_say_what_it_runs_is_not_safe_to_restart(
    rt: Runtime, admin: users.Caller, executor: FakeExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = paused_by_the_drain(rt, admin)

    def unreachable(ref: str) -> bool:
        raise SlurmError("squeue failed: Unable to contact slurm controller")

    monkeypatch.setattr(executor, "is_alive", unreachable)
    status = maintenance.status(rt)
    assert not status.safe_to_restart
    assert status.executor_unknown == (
        "the executor cannot say what it still runs "
        "(squeue failed: Unable to contact slurm controller)"
    )
    assert status.message.endswith(f"; {status.executor_unknown}")
    monkeypatch.undo()
    for ref in refs(rt, run_id):
        executor.die(ref)
    assert maintenance.status(rt).safe_to_restart


def test_an_attempt_the_database_does_not_know_but_slurm_still_runs_is_not_safe(
    rt: Runtime, admin: users.Caller, executor: HoldingExecutor
) -> None:
    # A database restored from a backup taken during the drain: it says attempt 1 paused, while
    # attempt 2, started after the backup, still holds its nodes on Slurm.
    run_id = paused_by_the_drain(rt, admin)
    for ref in refs(rt, run_id):
        executor.die(ref)
    assert maintenance.status(rt).safe_to_restart

    executor.live = {(run_id, 2): "Slurm job 12 (RUNNING)", ("another-servers-run", 1): "job 13"}
    status = maintenance.status(rt)
    assert not status.safe_to_restart
    assert [(b.run_id, b.why) for b in status.blockers] == [
        (run_id, "paused in the database, but attempt 2 still runs (Slurm job 12 (RUNNING))")
    ]


# A runner that outlives its attempt's end: it ignores SIGTERM (the pause's signal) and waits.
STUBBORN = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
while True:
    time.sleep(0.05)
"""


def test_with_the_local_executor_a_paused_run_whose_runner_lives_is_not_safe(
    settings: Settings, tmp_path: Path
) -> None:
    script = tmp_path / "runner.py"
    script.write_text(STUBBORN)
    local = LocalExecutor([sys.executable, str(script)])
    rt = build_runtime(settings, executor=local)
    started: list[str] = []
    try:
        with rt.transaction() as session:
            for name, token in TOKENS.items():
                users.ensure_user(session, name, token)
            users.make_admin(session, "alice")
            admin = users.authenticate(session, "Bearer alice-token")
        run_id = paused_by_the_drain(rt, admin)  # its runner got SIGTERM, ignored it, lives on
        (ref,) = started[:] = refs(rt, run_id)
        assert local.is_alive(ref)
        status = maintenance.status(rt)
        assert not status.safe_to_restart
        assert [b.why for b in status.blockers] == [
            f"paused in the database, but its runner still runs ({ref})"
        ]
        local.kill(ref)
        eventually(lambda: not local.is_alive(ref), what="the runner to end")
        assert maintenance.status(rt).safe_to_restart
    finally:
        for ref in started:  # whatever the test's end, no runner is left behind
            local.kill(ref)
        rt.engine.dispose()
