"""The transition tables, walked pair by pair through the only writer of a status, and every node
state × node event through the only writer of a node's record."""

from __future__ import annotations

import itertools

import pytest
from sqlalchemy import func, select

from starforge.contract.errors import InvalidTransition
from starforge.contract.nodes import NodeRecord
from starforge.contract.states import (
    NODE_TRANSITIONS,
    TRANSITIONS,
    EndReason,
    JobStatus,
    NodeEvent,
    NodeState,
)
from starforge.server import statemachine
from starforge.server.db.models import Attempt, Event, Run
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


def unadmitted(run_id: str) -> Run:
    """A run as a submit builds it, before admission gives it its first status."""
    return Run(
        id=run_id,
        user="alice",
        project="p",
        experiment="e",
        method="m",
        status="",
        spec={},
        manifest={},
        pools=[],
        idempotency_key="k" * 8,
    )


def test_admit_gives_a_new_run_queued_and_an_event_from_nothing(rt: Runtime) -> None:
    with rt.transaction() as session:
        run = unadmitted("r-0000000002")
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


# ---- nodes ------------------------------------------------------------------------------------

NODE_PAIRS = list(itertools.product(NodeState, NodeEvent))


def _attempt_with_node(rt: Runtime, state: NodeState) -> dict[str, object]:
    """A run's attempt whose node 0 is in ``state`` (set up directly); its stored record."""
    insert_run(rt, "r-0000000009", status=JobStatus.RUNNING)
    ref = None if state is NodeState.PENDING else "fake:1"
    record = NodeRecord(node="h200-1", pool="h200", ref=ref, state=state, beat=1.0)
    with rt.transaction() as session:
        attempt = Attempt(run_id="r-0000000009", number=1, log_path="")
        statemachine.place_nodes(attempt, {0: NodeRecord(node="h200-1", pool="h200")})
        attempt.nodes["0"] = record.model_dump(mode="json")
        session.add(attempt)
    return record.model_dump(mode="json")


def _stored(rt: Runtime) -> Attempt:
    with rt.transaction() as session:
        attempt = session.scalars(select(Attempt)).one()
        session.expunge(attempt)
        return attempt


@pytest.mark.parametrize(("state", "event"), NODE_PAIRS, ids=[f"{s}+{e}" for s, e in NODE_PAIRS])
def test_every_node_event_moves_a_node_exactly_as_the_node_table_says(
    rt: Runtime, state: NodeState, event: NodeEvent
) -> None:
    before = _attempt_with_node(rt, state)
    dst = NODE_TRANSITIONS[state].get(event)
    with rt.transaction() as session:
        attempt = session.scalars(select(Attempt)).one()
        got = statemachine.node_event(
            attempt,
            0,
            event,
            ref="fake:2",
            exit_code=3,
            end_reason=EndReason.OOM,
            why="gone",
            beat=9.0,
        )
    stored = _stored(rt)
    if dst is None:
        assert got is None and stored.nodes["0"] == before  # rejected: nothing changed
        return
    node = stored.node_records()[0]
    assert got == node and node.state is dst and node.beat == 9.0  # saved by the transaction
    if event in (NodeEvent.STARTED, NodeEvent.ADOPTED):
        assert node.ref == stored.executor_ref == "fake:2"
    if event is NodeEvent.EXITED:
        assert (node.exit_code, node.end_reason, node.lost) == (3, EndReason.OOM, False)
    if event in (NodeEvent.LOST, NodeEvent.STARTUP_FAILED):
        assert (node.exit_code, node.lost, node.why) == (None, True, "gone")
        want = EndReason.STARTUP_FAILED if event is NodeEvent.STARTUP_FAILED else EndReason.OOM
        assert node.end_reason is want


def test_an_event_for_a_node_the_attempt_does_not_have_changes_nothing(rt: Runtime) -> None:
    before = _attempt_with_node(rt, NodeState.RUNNING)
    with rt.transaction() as session:
        attempt = session.scalars(select(Attempt)).one()
        assert statemachine.node_event(attempt, 1, NodeEvent.EXITED, exit_code=0) is None
    assert _stored(rt).nodes == {"0": before}


def test_placing_nodes_twice_or_not_pending_is_refused() -> None:
    attempt = Attempt(run_id="r-1", number=1, log_path="")
    with pytest.raises(InvalidTransition):
        statemachine.place_nodes(attempt, {0: NodeRecord(state=NodeState.RUNNING)})
    statemachine.place_nodes(attempt, {0: NodeRecord()})
    with pytest.raises(InvalidTransition):
        statemachine.place_nodes(attempt, {1: NodeRecord()})


# ---- rows outside the unit of work (statemachine.load / save) --------------------------------


def test_a_run_admitted_and_moved_in_one_transaction_keeps_its_events_in_order(
    rt: Runtime,
) -> None:
    with rt.transaction() as session:
        run = unadmitted("r-0000000020")
        statemachine.admit(session, run, reason="waiting", actor="alice")
        statemachine.transition(session, run, JobStatus.STOPPED, reason="stop", actor="alice")
    with rt.transaction() as session:
        events = session.scalars(select(Event).order_by(Event.id)).all()
        assert [(e.src, e.dst) for e in events] == [(None, "queued"), ("queued", "stopped")]
        assert session.get(Run, "r-0000000020").status == "stopped"  # type: ignore[union-attr]


def test_a_loaded_run_saves_its_transition_and_its_new_attempt(rt: Runtime) -> None:
    insert_run(rt, "r-0000000021", status=JobStatus.QUEUED)
    with rt.transaction() as session:
        rows = statemachine.load(session, "r-0000000021", attempt=0, queued=True)
        assert rows is not None and rows.attempt is None
        rows.attempt = Attempt(run_id="r-0000000021", number=1, allocation=[])
        statemachine.place_nodes(rows.attempt, {0: NodeRecord(node="n1", pool="all")})
        rows.run.current_attempt = 1
        statemachine.transition(session, rows.run, JobStatus.STARTING, reason="go", actor="t")
        statemachine.save(session, rows)
    with rt.transaction() as session:
        assert statemachine.load(session, "r-0000000021", queued=True) is None  # not queued now
        rows = statemachine.load(session, "r-0000000021")
        assert rows is not None and rows.attempt is not None
        assert (rows.run.status, rows.run.reason, rows.run.current_attempt) == ("starting", "go", 1)
        assert rows.attempt.node_records()[0].state is NodeState.PENDING
        statemachine.node_event(rows.attempt, 0, NodeEvent.STARTED, ref="x:1")
        statemachine.save(session, rows)
    with rt.transaction() as session:
        attempt = session.scalars(select(Attempt)).one()
        assert (attempt.executor_ref, attempt.node_records()[0].state) == ("x:1", NodeState.STARTED)
        events = session.scalars(select(Event)).all()
        assert [(e.src, e.dst, e.reason) for e in events] == [("queued", "starting", "go")]


def test_saving_an_attempt_that_was_not_loaded_is_refused(rt: Runtime) -> None:
    insert_run(rt, "r-0000000022", status=JobStatus.QUEUED)
    with rt.transaction() as session:
        rows = statemachine.load(session, "r-0000000022")
        assert rows is not None
        rows.attempt = Attempt(id=999, run_id="r-0000000022", number=1, allocation=[])
        with pytest.raises(ValueError, match="was not loaded"):
            statemachine.save(session, rows)


def test_there_is_no_row_to_load_for_an_unknown_run(rt: Runtime) -> None:
    with rt.transaction() as session:
        assert statemachine.load(session, "r-0000000099") is None
