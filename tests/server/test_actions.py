"""User actions as proposals: stop, pause, resume and retry, accepted or rejected with a reason."""

from __future__ import annotations

import itertools

import pytest
from sqlalchemy import select

from starforge.contract.states import (
    PAUSABLE,
    RESUMABLE,
    RETRYABLE,
    STOPPABLE,
    EndReason,
    JobStatus,
)
from starforge.server.db.models import Event
from starforge.server.runtime import Runtime
from starforge.server.services.runs import actions

from .factories import FakeExecutor, force, member, report, run_row, running_run, schedule, submit
from .lifecycle_factories import binding, checkpoint, start

S = JobStatus


def test_pause_of_a_running_run_signals_it_with_the_pause_grace_and_waits_for_the_save(
    rt: Runtime, executor: FakeExecutor
) -> None:
    run_id = running_run(rt)
    grace: list[float] = []
    executor.stop = lambda ref, grace_s: grace.append(grace_s)  # type: ignore[method-assign]
    result = actions.pause(rt, member("alice"), run_id)
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
    actions.pause(rt, member("alice"), first)
    report(rt, first, "exited", exit_code=143, rank=1)
    assert schedule(rt) == []  # a distributed save needs every rank: rank 0 still saves
    report(rt, first, "exited", exit_code=143, rank=0)
    assert run_row(rt, first).status == "paused"
    assert schedule(rt) == [waiting]


def test_pause_of_a_queued_run_holds_it_until_resumed(rt: Runtime, executor: FakeExecutor) -> None:
    run_id = submit(rt).run_id
    result = actions.pause(rt, member("alice"), run_id)
    assert (result.accepted, result.status) == (True, S.PAUSED)
    assert schedule(rt) == [] and executor.started == []
    assert actions.resume(rt, member("alice"), run_id).status is S.QUEUED
    assert schedule(rt) == [run_id]
    assert run_row(rt, run_id).current_attempt == 1  # holding it made no attempt


def test_resume_starts_a_new_attempt_of_the_same_run_from_the_latest_checkpoint(
    rt: Runtime,
) -> None:
    run_id = running_run(rt)
    actions.pause(rt, member("alice"), run_id)
    checkpoint(rt, run_id, "checkpoint-9", hf=True)
    checkpoint(rt, run_id, "checkpoint-10", hf=True)
    report(rt, run_id, "exited", exit_code=143)
    result = actions.resume(rt, member("alice"), run_id)
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
        actions.stop(rt, member("alice"), run_id)
    report(rt, run_id, "exited", exit_code=143 if ending == "stop" else 1)
    assert run_row(rt, run_id).status == ("stopped" if ending == "stop" else "failed")
    result = actions.retry(rt, member("alice"), run_id)
    assert (result.accepted, result.status) == (True, S.QUEUED)
    assert "no checkpoint yet: it starts from the beginning" in result.message
    run = run_row(rt, run_id)
    assert (run.end_reason, run.ended_at, run.exit_code, run.auto_retries) == (None, None, None, 0)
    assert (run.events[-1].dst, run.events[-1].actor) == ("queued", "alice")


# What each accepted action makes of each status it applies to ...
ACCEPTED: dict[tuple[str, S], S] = {
    ("stop", S.QUEUED): S.STOPPED,
    ("stop", S.STARTING): S.STOPPING,
    ("stop", S.RUNNING): S.STOPPING,
    ("stop", S.PAUSING): S.STOPPING,
    ("stop", S.PAUSED): S.STOPPED,
    ("pause", S.QUEUED): S.PAUSED,
    ("pause", S.STARTING): S.PAUSING,
    ("pause", S.RUNNING): S.PAUSING,
    ("resume", S.PAUSED): S.QUEUED,
    ("retry", S.FAILED): S.QUEUED,
    ("retry", S.STOPPED): S.QUEUED,
}
# ... and what the user reads for every other pair ("run <id> " comes first).
REJECTED: dict[tuple[str, S], str] = {
    ("stop", S.STOPPING): "is already stopping",
    ("stop", S.SUCCEEDED): "already succeeded",
    ("stop", S.FAILED): "already failed",
    ("stop", S.STOPPED): "already stopped",
    ("pause", S.STOPPING): "is already stopping",
    ("pause", S.PAUSING): "is already pausing",
    ("pause", S.PAUSED): "is already paused",
    ("pause", S.SUCCEEDED): "already succeeded",
    ("pause", S.FAILED): "already failed",
    ("pause", S.STOPPED): "already stopped",
    ("resume", S.QUEUED): "is queued; nothing to resume",
    ("resume", S.STARTING): "is starting; nothing to resume",
    ("resume", S.RUNNING): "is running; nothing to resume",
    ("resume", S.STOPPING): "is already stopping",
    ("resume", S.PAUSING): "is already pausing",
    ("resume", S.SUCCEEDED): "already succeeded; submit again to train anew",
    ("resume", S.FAILED): "already failed; `sf job retry` requeues it",
    ("resume", S.STOPPED): "already stopped; `sf job retry` requeues it",
    ("retry", S.QUEUED): "is queued; nothing to retry",
    ("retry", S.STARTING): "is starting; nothing to retry",
    ("retry", S.RUNNING): "is running; nothing to retry",
    ("retry", S.STOPPING): "is already stopping",
    ("retry", S.PAUSING): "is already pausing",
    ("retry", S.PAUSED): "is already paused; `sf job resume` continues it",
    ("retry", S.SUCCEEDED): "already succeeded; submit again to train anew",
}
ACTIONS = ["stop", "pause", "resume", "retry"]
MATRIX = list(itertools.product(ACTIONS, S))


def run_in(rt: Runtime, status: S) -> str:
    """A run in ``status``, reached as a user's run would (forced only past ``running``)."""
    if status is S.QUEUED:
        return submit(rt).run_id
    if status is S.STARTING:
        run_id = submit(rt).run_id
        assert schedule(rt) == [run_id]  # placed and started; its runner has not reported yet
        return run_id
    run_id = running_run(rt)
    path = {
        S.RUNNING: [],
        S.STOPPING: [S.STOPPING],
        S.PAUSING: [S.PAUSING],
        S.PAUSED: [S.PAUSING, S.PAUSED],
        S.SUCCEEDED: [S.SUCCEEDED],
        S.FAILED: [S.FAILED],
        S.STOPPED: [S.STOPPING, S.STOPPED],
    }[status]
    force(rt, run_id, *path)
    return run_id


def test_the_matrix_covers_every_action_and_status_once_and_agrees_with_the_action_sets() -> None:
    assert set(ACCEPTED) | set(REJECTED) == set(MATRIX)
    assert not set(ACCEPTED) & set(REJECTED)
    allowed = {"stop": STOPPABLE, "pause": PAUSABLE, "resume": RESUMABLE, "retry": RETRYABLE}
    for action, statuses in allowed.items():
        assert {s for a, s in ACCEPTED if a == action} == statuses


@pytest.mark.parametrize(("action", "status"), MATRIX, ids=[f"{a}-{s}" for a, s in MATRIX])
def test_every_action_on_every_status_is_accepted_or_rejected_with_the_reason(
    rt: Runtime, executor: FakeExecutor, action: str, status: S
) -> None:
    run_id = run_in(rt, status)
    before = run_row(rt, run_id)
    live = [ref for ref, _, _ in executor.started] if status.is_active else []
    result = getattr(actions, action)(rt, member("alice"), run_id)
    after = run_row(rt, run_id)
    if (action, status) in REJECTED:
        assert (result.accepted, result.status, result.message) == (
            False,
            status,
            f"run {run_id} {REJECTED[action, status]}",
        )
        assert (after.status, len(after.events)) == (status.value, len(before.events))
        assert executor.stopped == []
        return
    dst = ACCEPTED[action, status]
    assert (result.accepted, result.status, after.status) == (True, dst, dst.value)
    assert [(e.src, e.dst, e.actor) for e in after.events[len(before.events) :]] == [
        (status.value, dst.value, "alice")
    ]
    # Only a run that holds resources has runners to signal; they are signalled after the commit.
    assert executor.stopped == (live if dst in (S.STOPPING, S.PAUSING) else [])


def test_each_action_is_an_event_by_its_user(rt: Runtime) -> None:
    run_id = running_run(rt)
    actions.pause(rt, member("alice"), run_id)
    report(rt, run_id, "exited", exit_code=143)
    actions.resume(rt, member("alice"), run_id)
    actions.stop(rt, member("alice"), run_id)
    actions.retry(rt, member("alice"), run_id)
    with rt.transaction() as session:
        rows = session.scalars(select(Event).where(Event.actor == "alice").order_by(Event.id)).all()
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
        actions.pause(rt, member("bob"), run_id)
    assert run_row(rt, run_id).status == "running"


def test_stop_of_a_paused_run_keeps_why_it_ended(rt: Runtime) -> None:
    run_id = submit(rt).run_id
    actions.pause(rt, member("alice"), run_id)
    actions.stop(rt, member("alice"), run_id)
    run = run_row(rt, run_id)
    assert (run.status, run.end_reason) == ("stopped", EndReason.STOPPED_BY_USER)
