"""Maintenance drain through the services: what can resume is paused (the pause path), what
cannot is reported, dispatch stops while submissions still queue, and resume requeues in order."""

from __future__ import annotations

import pytest

from starforge.contract.states import JobStatus
from starforge.server.runtime import Runtime, build_runtime
from starforge.server.services import dispatch, jobs, maintenance, users

from .factories import FakeExecutor, report, run_row, running_run, schedule, submit


@pytest.fixture
def admin(rt: Runtime) -> users.Caller:
    with rt.transaction() as session:
        users.make_admin(session, "alice")
        return users.authenticate(session, "Bearer alice-token")


def with_checkpoint(rt: Runtime, run_id: str, step: int = 5) -> None:
    folder = dispatch.run_dir_of(rt, run_row(rt, run_id)) / "out" / "checkpoints"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"step-{step}").write_text(f"step={step}\n")


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
    assert jobs.get(rt, "bob", queued).reason.startswith("maintenance (driver upgrade): ")

    for run_id in (first, second):
        report(rt, run_id, "exited", exit_code=143)  # the checkpoint is saved, the job exits
        assert run_row(rt, run_id).status == JobStatus.PAUSED
    report(rt, blocker, "exited", exit_code=0)  # the blocker finished on its own
    status = maintenance.status(rt, admin)
    assert (status.pausing, status.blockers, status.safe_to_restart) == ([], [], True)

    # The drain lives in the database: a restarted server still holds dispatch.
    again = build_runtime(rt.settings, executor=FakeExecutor())
    assert maintenance.status(again, admin).active
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
    rt: Runtime, admin: users.Caller
) -> None:
    blocker = running_run(rt, user="bob", profiles=["h100:8"])
    assert maintenance.drain(rt, admin, "kernel").paused == []
    assert maintenance.pause_resumable(rt) == []  # still nothing to resume from
    with_checkpoint(rt, blocker)  # it saves one after the drain began
    assert maintenance.pause_resumable(rt) == [blocker]  # the reconciler's next tick
    assert maintenance.pause_resumable(rt) == []  # once
    status = maintenance.status(rt, admin)
    assert (status.paused, status.pausing, status.blockers) == ([blocker], [blocker], [])
    report(rt, blocker, "exited", exit_code=143)
    assert maintenance.status(rt, admin).safe_to_restart
    maintenance.resume(rt, admin)
    assert schedule(rt) == [blocker]


def test_no_drain_pauses_nothing(rt: Runtime) -> None:
    run_id = running_run(rt, user="bob", profiles=["h100:8"])
    with_checkpoint(rt, run_id)
    assert maintenance.pause_resumable(rt) == []
    assert run_row(rt, run_id).status == JobStatus.RUNNING
