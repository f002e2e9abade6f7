"""User actions as proposals: stop, pause, resume and retry, accepted or rejected with a reason."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from starforge.contract.states import EndReason, JobStatus
from starforge.server.db.models import Event
from starforge.server.runtime import Runtime
from starforge.server.services import actions

from .factories import FakeExecutor, force, report, run_row, running_run, schedule, submit
from .lifecycle_factories import binding, checkpoint, start

S = JobStatus


def test_pause_of_a_running_run_signals_it_with_the_pause_grace_and_waits_for_the_save(
    rt: Runtime, executor: FakeExecutor
) -> None:
    run_id = running_run(rt)
    grace: list[float] = []
    executor.stop = lambda ref, grace_s: grace.append(grace_s)  # type: ignore[method-assign]
    result = actions.pause(rt, "alice", run_id)
    assert (result.accepted, result.status) == (True, S.PAUSING)
    assert result.message == f"run {run_id} is pausing (saving a checkpoint)"
    assert grace == [rt.settings.pause_grace_s]
    report(rt, run_id, "exited", exit_code=143)
    run = run_row(rt, run_id)
    assert (run.status, run.end_reason, run.exit_code) == ("paused", "paused_by_user", 143)
    assert run.attempts[0].ended_at is not None


def test_a_paused_run_frees_its_gpus_for_the_next_run(rt: Runtime) -> None:
    first = running_run(rt, profiles=["h200:16"])
    waiting = submit(rt, profiles=["h200:16"]).run_id
    assert schedule(rt) == []
    actions.pause(rt, "alice", first)
    report(rt, first, "exited", exit_code=143, rank=1)
    assert schedule(rt) == []  # a distributed save needs every rank: rank 0 still saves
    report(rt, first, "exited", exit_code=143, rank=0)
    assert run_row(rt, first).status == "paused"
    assert schedule(rt) == [waiting]


def test_pause_of_a_queued_run_holds_it_until_resumed(rt: Runtime, executor: FakeExecutor) -> None:
    run_id = submit(rt).run_id
    result = actions.pause(rt, "alice", run_id)
    assert (result.accepted, result.status) == (True, S.PAUSED)
    assert schedule(rt) == [] and executor.started == []
    assert actions.resume(rt, "alice", run_id).status is S.QUEUED
    assert schedule(rt) == [run_id]
    assert run_row(rt, run_id).current_attempt == 1  # holding it made no attempt


def test_resume_starts_a_new_attempt_of_the_same_run_from_the_latest_checkpoint(
    rt: Runtime,
) -> None:
    run_id = running_run(rt)
    actions.pause(rt, "alice", run_id)
    checkpoint(rt, run_id, "checkpoint-9", hf=True)
    checkpoint(rt, run_id, "checkpoint-10", hf=True)
    report(rt, run_id, "exited", exit_code=143)
    result = actions.resume(rt, "alice", run_id)
    assert result.accepted and result.status is S.QUEUED
    assert result.message == (
        f"run {run_id} resumed: queued as attempt 2; it continues from checkpoint-10 (step 10)"
    )
    start(rt, run_id, attempt=2)
    run = run_row(rt, run_id)
    assert [a.number for a in run.attempts] == [1, 2] and run.status == "running"
    assert binding(rt, run_id, attempt=2)["resume_from"].endswith("checkpoints/checkpoint-10")
    assert run.attempts[1].log_path.endswith("logs/attempt-2.log")


@pytest.mark.parametrize("ending", ["stop", "crash"])
def test_retry_requeues_a_stopped_or_failed_run_and_resets_its_auto_retries(
    rt: Runtime, ending: str
) -> None:
    run_id = running_run(rt)
    if ending == "stop":
        actions.stop(rt, "alice", run_id)
    report(rt, run_id, "exited", exit_code=143 if ending == "stop" else 1)
    assert run_row(rt, run_id).status == ("stopped" if ending == "stop" else "failed")
    result = actions.retry(rt, "alice", run_id)
    assert (result.accepted, result.status) == (True, S.QUEUED)
    assert "no checkpoint yet: it starts from the beginning" in result.message
    run = run_row(rt, run_id)
    assert (run.end_reason, run.ended_at, run.exit_code, run.auto_retries) == (None, None, None, 0)
    assert (run.events[-1].dst, run.events[-1].actor) == ("queued", "alice")


@pytest.mark.parametrize(
    ("action", "status", "message"),
    [
        ("stop", S.SUCCEEDED, "already succeeded"),
        ("pause", S.SUCCEEDED, "already succeeded"),
        ("resume", S.SUCCEEDED, "already succeeded; submit again to train anew"),
        ("retry", S.SUCCEEDED, "already succeeded; submit again to train anew"),
        ("pause", S.FAILED, "already failed"),
        ("resume", S.FAILED, "already failed; `sf job retry` requeues it"),
        ("resume", S.STOPPED, "already stopped; `sf job retry` requeues it"),
        ("retry", S.PAUSED, "is already paused; `sf job resume` continues it"),
        ("pause", S.PAUSED, "is already paused"),
        ("pause", S.PAUSING, "is already pausing"),
        ("pause", S.STOPPING, "is already stopping"),
        ("resume", S.RUNNING, "is running; nothing to resume"),
        ("retry", S.RUNNING, "is running; nothing to retry"),
        ("resume", S.QUEUED, "is queued; nothing to resume"),
    ],
)
def test_an_action_that_does_not_apply_is_rejected_with_the_reason(
    rt: Runtime, action: str, status: S, message: str
) -> None:
    run_id = running_run(rt)
    path = {
        S.SUCCEEDED: [S.SUCCEEDED],
        S.FAILED: [S.FAILED],
        S.STOPPED: [S.STOPPING, S.STOPPED],
        S.PAUSED: [S.PAUSING, S.PAUSED],
        S.PAUSING: [S.PAUSING],
        S.STOPPING: [S.STOPPING],
        S.RUNNING: [],
        S.QUEUED: [S.FAILED, S.QUEUED],
    }[status]
    force(rt, run_id, *path)
    events = len(run_row(rt, run_id).events)
    result = getattr(actions, action)(rt, "alice", run_id)
    assert (result.accepted, result.status, result.message) == (
        False,
        status,
        f"run {run_id} {message}",
    )
    assert len(run_row(rt, run_id).events) == events


def test_each_action_is_an_event_by_its_user(rt: Runtime) -> None:
    run_id = running_run(rt)
    actions.pause(rt, "alice", run_id)
    report(rt, run_id, "exited", exit_code=143)
    actions.resume(rt, "alice", run_id)
    actions.stop(rt, "alice", run_id)
    actions.retry(rt, "alice", run_id)
    with rt.transaction() as session:
        rows = session.scalars(select(Event).where(Event.actor == "alice")).all()
        assert [(e.src, e.dst) for e in rows] == [
            (None, "queued"),
            ("running", "pausing"),
            ("paused", "queued"),
            ("queued", "stopped"),
            ("stopped", "queued"),
        ]
    assert run_row(rt, run_id).end_reason is None


def test_an_action_on_someone_elses_run_is_not_found(rt: Runtime) -> None:
    from starforge.contract.errors import RunNotFound

    run_id = running_run(rt)
    with pytest.raises(RunNotFound):
        actions.pause(rt, "bob", run_id)
    assert run_row(rt, run_id).status == "running"


def test_stop_of_a_paused_run_keeps_why_it_ended(rt: Runtime) -> None:
    run_id = submit(rt).run_id
    actions.pause(rt, "alice", run_id)
    actions.stop(rt, "alice", run_id)
    run = run_row(rt, run_id)
    assert (run.status, run.end_reason) == ("stopped", EndReason.STOPPED_BY_USER)
