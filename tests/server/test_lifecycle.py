"""Runner events: how an attempt ends, idempotency, and run-token authentication."""

from __future__ import annotations

import pytest

from starforge.contract.api import LifecycleEvent
from starforge.contract.errors import Forbidden, RunNotFound, Unauthorized
from starforge.contract.states import EndReason, JobStatus
from starforge.server.runtime import Runtime
from starforge.server.services import lifecycle
from starforge.server.services.lifecycle import decide

from .factories import FakeExecutor, binding, report, run_row, running_run, schedule, submit

S = JobStatus


def nodes(*states: tuple[str, int | None]) -> dict[str, dict[str, object]]:
    return {str(i): {"state": st, "exit_code": code} for i, (st, code) in enumerate(states)}


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
    n = nodes(("exited", 137))
    n["0"]["end_reason"] = "oom"
    d = decide(S.RUNNING, n)
    assert d is not None and d.end_reason is EndReason.OOM


def test_a_lost_node_fails_the_run_as_node_lost() -> None:
    n = nodes(("exited", None))
    n["0"]["lost"] = True
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
    assert run.attempts[0].nodes["0"]["state"] == "running"


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
    assert run.attempts[0].nodes["0"]["state"] == "running"
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
