"""Runner events: how an attempt ends (pauses included), idempotency, run-token authentication,
heartbeats and fencing, and the auto-retry policy."""

from __future__ import annotations

import pytest

from starforge.contract.api import LifecycleEvent
from starforge.contract.errors import Forbidden, RunNotFound, Unauthorized
from starforge.contract.nodes import NodeRecord
from starforge.contract.states import EndReason, JobStatus, NodeState
from starforge.server.runtime import Runtime
from starforge.server.services.runs import lifecycle
from starforge.server.services.runs.lifecycle import decide

from .factories import (
    FakeExecutor,
    binding,
    force,
    report,
    run_row,
    running_run,
    schedule,
    submit,
)
from .lifecycle_factories import beat, checkpoint, start, submit_with_retries

S = JobStatus


def nodes(*states: tuple[str, int | None]) -> dict[int, NodeRecord]:
    """Typed node records by rank, each in a state with its exit code."""
    return {
        i: NodeRecord(state=NodeState(st), exit_code=code) for i, (st, code) in enumerate(states)
    }


def with_(records: dict[int, NodeRecord], rank: int, **fields: object) -> dict[int, NodeRecord]:
    return {**records, rank: NodeRecord.model_validate({**records[rank].model_dump(), **fields})}


# ---- the decision, as a pure function ---------------------------------------------------------


def test_an_attempt_goes_on_while_a_node_runs_and_none_failed() -> None:
    assert decide(S.RUNNING, nodes(("exited", 0), ("running", None))) is None


def test_all_nodes_exiting_zero_is_success() -> None:
    d = decide(S.RUNNING, nodes(("exited", 0), ("exited", 0)))
    assert d is not None and (d.status, d.end_reason, d.exit_code) == (
        S.SUCCEEDED,
        EndReason.COMPLETED,
        0,
    )


def test_one_node_exiting_non_zero_fails_the_run_at_once() -> None:
    d = decide(S.RUNNING, nodes(("running", None), ("exited", 3)))
    assert d is not None and (d.status, d.end_reason, d.exit_code) == (
        S.FAILED,
        EndReason.EXIT_NONZERO,
        3,
    )
    assert d.reason == "node 1 exited with code 3"


def test_an_end_reason_reported_by_the_runner_is_kept() -> None:
    n = with_(nodes(("exited", 137)), 0, end_reason="oom")
    d = decide(S.RUNNING, n)
    assert d is not None and d.end_reason is EndReason.OOM


def test_a_lost_node_fails_the_run_as_node_lost() -> None:
    n = with_(nodes(("exited", None)), 0, lost=True)
    d = decide(S.RUNNING, n)
    assert d is not None and (d.status, d.end_reason, d.exit_code) == (
        S.FAILED,
        EndReason.NODE_LOST,
        None,
    )


def test_any_ending_of_a_stopping_run_is_a_stop() -> None:
    d = decide(S.STOPPING, nodes(("exited", 143)))
    assert d is not None and (d.status, d.end_reason, d.exit_code) == (
        S.STOPPED,
        EndReason.STOPPED_BY_USER,
        143,
    )


def test_a_clean_exit_of_a_pausing_run_is_a_pause() -> None:
    d = decide(S.PAUSING, nodes(("exited", 0)))
    assert d is not None and (d.status, d.end_reason) == (S.PAUSED, EndReason.PAUSED_BY_USER)


# ---- events through the service ---------------------------------------------------------------


def test_running_moves_a_starting_run_to_running(rt: Runtime) -> None:
    run_id = submit(rt).run_id
    schedule(rt)
    report(rt, run_id, "starting")
    assert run_row(rt, run_id).status == "starting"
    report(rt, run_id, "running")
    run = run_row(rt, run_id)
    assert run.status == "running" and run.started_at is not None
    assert run.attempts[0].node_records()[0].state is NodeState.RUNNING


def test_a_clean_exit_succeeds_the_run_and_wakes_the_scheduler(rt: Runtime) -> None:
    run_id = running_run(rt)
    before = rt.wakeups
    outcome = report(rt, run_id, "exited", exit_code=0)
    assert outcome.accepted and outcome.ended
    run = run_row(rt, run_id)
    attempt = run.attempts[0]
    assert (run.status, run.end_reason, run.exit_code) == ("succeeded", "completed", 0)
    assert (attempt.exit_code, attempt.end_reason) == (0, "completed")
    assert attempt.ended_at is not None and run.ended_at is not None
    assert rt.wakeups == before + 1


def test_a_non_zero_exit_fails_the_run_with_its_code(rt: Runtime) -> None:
    run_id = running_run(rt)
    report(rt, run_id, "exited", exit_code=2)
    run = run_row(rt, run_id)
    assert (run.status, run.end_reason, run.exit_code) == ("failed", "exit_nonzero", 2)


def test_duplicate_events_change_nothing(rt: Runtime) -> None:
    run_id = running_run(rt)
    events = len(run_row(rt, run_id).events)
    report(rt, run_id, "running")
    report(rt, run_id, "starting")  # late and out of order
    run = run_row(rt, run_id)
    assert (run.status, len(run.events)) == ("running", events)
    assert run.attempts[0].node_records()[0].state is NodeState.RUNNING
    report(rt, run_id, "exited", exit_code=0)
    again = report(rt, run_id, "exited", exit_code=1)
    late = report(rt, run_id, "running")
    assert not again.accepted and not late.accepted
    run = run_row(rt, run_id)
    assert (run.status, run.exit_code, len(run.events)) == ("succeeded", 0, events + 1)


def test_an_event_of_another_attempt_or_node_is_ignored(rt: Runtime) -> None:
    run_id = running_run(rt)
    token = binding(rt, run_id)["run_token"]
    for ev in (
        LifecycleEvent(attempt=2, event="exited", exit_code=1),
        LifecycleEvent(attempt=1, node_rank=5, event="exited", exit_code=1),
    ):
        assert not lifecycle.handle(rt, run_id, token, ev).accepted
    assert run_row(rt, run_id).status == "running"


def test_a_two_node_run_ends_when_both_nodes_exit(rt: Runtime) -> None:
    run_id = running_run(rt, profiles=["h200:16"])
    report(rt, run_id, "exited", exit_code=0, rank=1)
    assert run_row(rt, run_id).status == "running"
    report(rt, run_id, "exited", exit_code=0)
    assert run_row(rt, run_id).status == "succeeded"


def test_a_failing_node_stops_the_others(rt: Runtime, executor: FakeExecutor) -> None:
    run_id = running_run(rt, profiles=["h200:16"])
    outcome = report(rt, run_id, "exited", exit_code=1, rank=1)
    assert run_row(rt, run_id).status == "failed"
    assert outcome.stop_refs == [executor.started[0][0]]
    assert executor.stopped == [executor.started[0][0]]


def test_a_run_token_works_only_for_its_own_run(rt: Runtime) -> None:
    mine = running_run(rt)
    other = running_run(rt)
    with pytest.raises(Forbidden):
        report(rt, other, "exited", exit_code=0, token=binding(rt, mine)["run_token"])
    assert run_row(rt, other).status == "running"


def test_an_event_without_a_token_is_unauthorized(rt: Runtime) -> None:
    run_id = running_run(rt)
    with pytest.raises(Unauthorized):
        lifecycle.handle(rt, run_id, None, LifecycleEvent(attempt=1, event="running"))


def test_an_event_for_an_unknown_run_is_not_found(rt: Runtime) -> None:
    with pytest.raises(RunNotFound):
        lifecycle.handle(rt, "r-0000000000", "x", LifecycleEvent(attempt=1, event="running"))


# ---- pausing ----------------------------------------------------------------------------------


def lost() -> NodeRecord:
    return NodeRecord(state=NodeState.EXITED, exit_code=None, lost=True)


@pytest.mark.parametrize("code", [143, 137, 0])
def test_a_pausing_node_that_saved_or_was_killed_makes_the_run_paused(code: int) -> None:
    d = decide(S.PAUSING, nodes(("exited", code)))
    assert d is not None and (d.status, d.end_reason, d.exit_code) == (
        S.PAUSED,
        EndReason.PAUSED_BY_USER,
        code,
    )


def test_a_pausing_attempt_waits_for_every_node_to_save() -> None:
    assert decide(S.PAUSING, nodes(("exited", 143), ("running", None))) is None
    d = decide(S.PAUSING, nodes(("exited", 143), ("exited", 143)))
    assert d is not None and d.status is S.PAUSED


def test_a_node_that_crashes_while_pausing_fails_the_run_at_once() -> None:
    d = decide(S.PAUSING, nodes(("running", None), ("exited", 1)))
    assert d is not None and (d.status, d.end_reason, d.exit_code) == (
        S.FAILED,
        EndReason.EXIT_NONZERO,
        1,
    )


def test_a_node_lost_while_pausing_still_ends_paused() -> None:
    n = {**nodes(("exited", 143)), 1: lost()}
    d = decide(S.PAUSING, n)
    assert d is not None and d.status is S.PAUSED


def test_a_runner_cannot_claim_success_for_a_failed_exit() -> None:
    n = with_(nodes(("exited", 3)), 0, end_reason="completed")
    d = decide(S.RUNNING, n)
    assert d is not None and (d.status, d.end_reason) == (S.FAILED, EndReason.EXIT_NONZERO)


# ---- heartbeats and fencing -------------------------------------------------------------------


def test_a_heartbeat_stamps_the_attempt_and_changes_no_status(rt: Runtime) -> None:
    run_id = running_run(rt)
    events = len(run_row(rt, run_id).events)
    assert beat(rt, run_id).accepted
    run = run_row(rt, run_id)
    attempt = run.attempts[0]
    assert (run.status, len(run.events)) == ("running", events)
    assert attempt.heartbeat_at is not None
    assert attempt.node_records()[0].beat == pytest.approx(attempt.heartbeat_at.timestamp())


def test_a_heartbeat_of_an_attempt_that_is_over_is_refused(rt: Runtime) -> None:
    run_id = running_run(rt)
    report(rt, run_id, "exited", exit_code=0)
    outcome = beat(rt, run_id)
    assert not outcome.accepted and "not running" in outcome.message


# ---- auto-retry -------------------------------------------------------------------------------


def end_as(rt: Runtime, run_id: str, reason: EndReason, attempt: int = 1) -> lifecycle.Outcome:
    token = binding(rt, run_id, attempt)["run_token"]
    ev = LifecycleEvent(attempt=attempt, event="exited", exit_code=137, end_reason=reason)
    return lifecycle.handle(rt, run_id, token, ev)


def test_a_preempted_run_is_requeued_from_its_latest_checkpoint(rt: Runtime) -> None:
    run_id = running_run(rt)
    checkpoint(rt, run_id, "step-5")
    checkpoint(rt, run_id, "step-10")
    end_as(rt, run_id, EndReason.PREEMPTED)
    run = run_row(rt, run_id)
    assert (run.status, run.auto_retries, run.ended_at) == ("queued", 1, None)
    assert run.attempts[0].end_reason == "preempted"
    failed, queued = run.events[-2:]
    assert (failed.dst, queued.dst, queued.actor) == ("failed", "queued", "auto-retry")
    assert queued.reason == "auto-retry 1 of 2 after preempted: resumes from step-10 (step 10)"
    start(rt, run_id, attempt=2)
    b = binding(rt, run_id, attempt=2)
    assert b["resume_from"].endswith("/out/checkpoints/step-10")
    assert run_row(rt, run_id).attempts[1].resumed_from == b["resume_from"]


def test_auto_retries_stop_at_the_limit_and_the_run_fails_with_its_history(rt: Runtime) -> None:
    run_id = submit_with_retries(rt, 1)
    start(rt, run_id)
    checkpoint(rt, run_id, "step-5")
    end_as(rt, run_id, EndReason.PREEMPTED)
    start(rt, run_id, attempt=2)
    end_as(rt, run_id, EndReason.PREEMPTED, attempt=2)
    run = run_row(rt, run_id)
    assert (run.status, run.end_reason, run.auto_retries) == ("failed", "preempted", 1)
    assert run.reason.endswith("not retried: auto-retries used up (1 of 1)")
    assert [a.end_reason for a in run.attempts] == ["preempted", "preempted"]
    assert [e.dst for e in run.events].count("queued") == 2  # submit, then one auto-retry


def test_a_training_failure_is_never_retried_automatically(rt: Runtime) -> None:
    run_id = running_run(rt)
    checkpoint(rt, run_id, "step-5")
    report(rt, run_id, "exited", exit_code=1)
    run = run_row(rt, run_id)
    assert (run.status, run.end_reason, run.auto_retries) == ("failed", "exit_nonzero", 0)


def test_a_run_lost_before_its_first_checkpoint_is_not_retried(rt: Runtime) -> None:
    run_id = running_run(rt)
    end_as(rt, run_id, EndReason.PREEMPTED)
    run = run_row(rt, run_id)
    assert run.status == "failed"
    assert run.reason.endswith("not retried: no checkpoint to resume from yet")


def test_max_retries_zero_at_submit_turns_auto_retry_off(rt: Runtime) -> None:
    run_id = submit_with_retries(rt, 0)
    start(rt, run_id)
    checkpoint(rt, run_id, "step-5")
    end_as(rt, run_id, EndReason.PREEMPTED)
    run = run_row(rt, run_id)
    assert run.status == "failed" and run.reason.endswith("(none allowed)")


def test_a_pause_names_the_checkpoint_it_kept(rt: Runtime) -> None:
    run_id = running_run(rt)
    force(rt, run_id, S.PAUSING)
    checkpoint(rt, run_id, "checkpoint-20", hf=True)
    checkpoint(rt, run_id, "checkpoint-100")  # half-written: no trainer_state.json yet
    report(rt, run_id, "exited", exit_code=143)
    run = run_row(rt, run_id)
    assert (run.status, run.end_reason, run.exit_code) == ("paused", "paused_by_user", 143)
    assert run.reason == "paused by user; latest checkpoint checkpoint-20 (step 20)"
