"""The transition table, walked pair by pair through the only writer of a status."""

from __future__ import annotations

import itertools

import pytest
from sqlalchemy import func, select

from starforge.contract.errors import InvalidTransition
from starforge.contract.states import TRANSITIONS, EndReason, JobStatus
from starforge.server import statemachine
from starforge.server.db.models import Event, Run
from starforge.server.runtime import Runtime

from .factories import insert_run

PAIRS = list(itertools.product(JobStatus, JobStatus))


@pytest.mark.parametrize(("src", "dst"), PAIRS, ids=[f"{s}->{d}" for s, d in PAIRS])
def test_every_transition_is_allowed_exactly_when_the_table_says_so(
    rt: Runtime, src: JobStatus, dst: JobStatus
) -> None:
    insert_run(rt, "r-0000000001", status=src)
    allowed = dst in TRANSITIONS[src]
    with rt.transaction() as session:
        run = session.get(Run, "r-0000000001")
        assert run is not None
        if allowed:
            statemachine.transition(session, run, dst, reason="why", actor="tester")
        else:
            with pytest.raises(InvalidTransition):
                statemachine.transition(session, run, dst, reason="why", actor="tester")
    with rt.transaction() as session:
        run = session.get(Run, "r-0000000001")
        assert run is not None
        events = session.scalars(select(Event)).all()
        if allowed:
            assert run.status == dst.value
            assert [(e.src, e.dst, e.reason, e.actor) for e in events] == [
                (src.value, dst.value, "why", "tester")
            ]
        else:
            assert run.status == src.value
            assert events == []


def test_admit_gives_a_new_run_queued_and_an_event_from_nothing(rt: Runtime) -> None:
    with rt.transaction() as session:
        run = Run(
            id="r-0000000002",
            user="alice",
            project="p",
            experiment="e",
            method="m",
            status="",
            spec_json="{}",
            manifest_json="{}",
            pools_json="[]",
            idempotency_key="k" * 8,
        )
        statemachine.admit(session, run, reason="waiting", actor="alice")
    with rt.transaction() as session:
        event = session.scalars(select(Event)).one()
        assert (event.src, event.dst, event.actor) == (None, "queued", "alice")
        assert session.get(Run, "r-0000000002").status == "queued"  # type: ignore[union-attr]


def test_admit_refuses_a_run_that_already_has_a_status(rt: Runtime) -> None:
    insert_run(rt, "r-0000000003", status=JobStatus.RUNNING)
    with rt.transaction() as session, pytest.raises(InvalidTransition):
        run = session.get(Run, "r-0000000003")
        assert run is not None
        statemachine.admit(session, run, reason="again", actor="alice")


def test_reaching_running_stamps_started_at_once(rt: Runtime) -> None:
    insert_run(rt, "r-0000000004", status=JobStatus.STARTING)
    with rt.transaction() as session:
        run = session.get(Run, "r-0000000004")
        assert run is not None
        statemachine.transition(session, run, JobStatus.RUNNING, reason="", actor="t")
        first = run.started_at
        assert first is not None
        statemachine.transition(session, run, JobStatus.PAUSING, reason="", actor="t")
        assert run.started_at == first


def test_a_terminal_status_stamps_the_end_and_retry_clears_it(rt: Runtime) -> None:
    insert_run(rt, "r-0000000005", status=JobStatus.RUNNING)
    with rt.transaction() as session:
        run = session.get(Run, "r-0000000005")
        assert run is not None
        run.exit_code = 3
        statemachine.transition(
            session,
            run,
            JobStatus.FAILED,
            reason="exit 3",
            actor="t",
            end_reason=EndReason.EXIT_NONZERO,
        )
        assert run.ended_at is not None
        assert run.end_reason == "exit_nonzero"
        statemachine.transition(session, run, JobStatus.QUEUED, reason="retry", actor="t")
        assert (run.ended_at, run.end_reason, run.exit_code) == (None, None, None)
    with rt.transaction() as session:
        assert session.scalar(select(func.count()).select_from(Event)) == 2


def test_each_event_records_from_to_reason_actor_and_time(rt: Runtime) -> None:
    insert_run(rt, "r-0000000006", status=JobStatus.RUNNING)
    path = [JobStatus.PAUSING, JobStatus.PAUSED, JobStatus.QUEUED, JobStatus.STARTING]
    with rt.transaction() as session:
        run = session.get(Run, "r-0000000006")
        assert run is not None
        for i, dst in enumerate(path):
            statemachine.transition(session, run, dst, reason=f"step {i}", actor=f"actor-{i}")
    with rt.transaction() as session:
        events = session.scalars(select(Event).order_by(Event.id)).all()
        assert [(e.src, e.dst, e.reason, e.actor) for e in events] == [
            ("running", "pausing", "step 0", "actor-0"),
            ("pausing", "paused", "step 1", "actor-1"),
            ("paused", "queued", "step 2", "actor-2"),
            ("queued", "starting", "step 3", "actor-3"),
        ]
        times = [e.at for e in events]
        assert times == sorted(times) and all(t.tzinfo is not None for t in times)


def test_a_resumed_run_forgets_its_pause_but_keeps_its_first_start(rt: Runtime) -> None:
    insert_run(rt, "r-0000000007", status=JobStatus.STARTING)
    with rt.transaction() as session:
        run = session.get(Run, "r-0000000007")
        assert run is not None
        statemachine.transition(session, run, JobStatus.RUNNING, reason="", actor="t")
        first = run.started_at
        statemachine.transition(session, run, JobStatus.PAUSING, reason="", actor="t")
        statemachine.transition(
            session,
            run,
            JobStatus.PAUSED,
            reason="",
            actor="t",
            end_reason=EndReason.PAUSED_BY_USER,
        )
        assert run.end_reason == "paused_by_user" and run.ended_at is None  # paused is not final
        statemachine.transition(session, run, JobStatus.QUEUED, reason="resumed", actor="t")
        assert (run.end_reason, run.ended_at, run.started_at) == (None, None, first)
