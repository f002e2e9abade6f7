"""The reconciler's decisions: property-based tests of the pure rules (per node and per attempt),
then the service on a real database with a fake executor (a lost heartbeat, a restart, adoption,
an exit record, a stop whose SIGKILL was lost with its server)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from starforge.contract.nodes import NodeRecord
from starforge.contract.states import TRANSITIONS, EndReason, JobStatus, NodeEvent, NodeState
from starforge.server import statemachine
from starforge.server.db.models import Run, utcnow
from starforge.server.runtime import Runtime
from starforge.server.services.runs import actions, reconcile
from starforge.server.services.runs.lifecycle import decide
from starforge.server.services.runs.reconcile import (
    REPORT_GRACE_S,
    Act,
    Clock,
    NodeFacts,
    judge_node,
)
from starforge.server.services.scheduling import dispatch

from .factories import FakeExecutor, member, report, run_row, running_run, submit
from .lifecycle_factories import beat, checkpoint, exit_record, runner_record

S = JobStatus
STATES = list(NodeState)


# ---- one node: judge_node ---------------------------------------------------------------------


@st.composite
def node_facts(draw: st.DrawFn) -> NodeFacts:
    ref = draw(st.sampled_from([None, "fake:1"]))
    record = draw(
        st.none()
        | st.builds(
            lambda code, why, at: {"exit_code": code, "end_reason": why, "at": at},
            st.integers(-1, 255),
            st.sampled_from([None, "exit_nonzero", "oom"]),
            st.none() | st.floats(0, 2000),
        )
    )
    return NodeFacts(
        state=draw(st.sampled_from(STATES)),
        ref=ref,
        alive=None if ref is None else draw(st.sampled_from([None, True, False])),
        exit_record=record,
        adoptable=None if ref is not None else draw(st.sampled_from([None, "local:7"])),
        beat=draw(st.none() | st.floats(0, 1000)),
    )


@st.composite
def clocks(draw: st.DrawFn) -> Clock:
    now = draw(st.floats(0, 2000))
    return Clock(
        now=now,
        since=draw(st.floats(0, now)),
        lost_after_s=draw(st.floats(0.1, 100)),
        overdue=draw(st.booleans()),
    )


def silent_for(f: NodeFacts, c: Clock) -> float | None:
    return None if f.beat is None else c.now - max(f.beat, c.since)


@given(node_facts(), clocks())
def test_an_exited_node_is_never_touched_again(f: NodeFacts, c: Clock) -> None:
    if f.state == "exited":
        assert judge_node(f, c).act is Act.LEAVE


@given(node_facts(), clocks())
def test_an_exit_record_settles_the_node_with_its_code_unless_its_live_runner_reports_it(
    f: NodeFacts, c: Clock
) -> None:
    v = judge_node(f, c)
    if f.state != "exited" and f.exit_record is not None:
        at = f.exit_record["at"]
        reporting = f.alive is True and at is not None and c.now - at < REPORT_GRACE_S
        expected = (Act.LEAVE, None) if reporting else (Act.EXIT, f.exit_record["exit_code"])
        assert (v.act, v.exit_code) == expected
    if v.act is Act.EXIT:
        assert f.exit_record is not None


@given(node_facts(), clocks())
def test_a_node_is_lost_only_when_gone_silent_or_never_started(f: NodeFacts, c: Clock) -> None:
    v = judge_node(f, c)
    if v.act is not Act.LOST:
        return
    assert f.state != "exited" and f.exit_record is None
    silent = silent_for(f, c)
    gone = f.alive is False
    never_started = f.ref is None and f.adoptable is None
    stale = f.alive is True and silent is not None and silent > c.lost_after_s
    assert gone or never_started or stale
    assert (v.end_reason == EndReason.STARTUP_FAILED.value) == never_started


@given(node_facts(), clocks())
def test_a_live_node_that_beat_recently_is_never_lost(f: NodeFacts, c: Clock) -> None:
    silent = silent_for(f, c)
    if f.alive is True and f.exit_record is None and (silent is None or silent <= c.lost_after_s):
        assert judge_node(f, c).act in (Act.LEAVE, Act.FORCE)


@given(node_facts(), clocks(), st.floats(0, 1000))
def test_losing_a_node_for_silence_never_reverts_as_time_passes(
    f: NodeFacts, c: Clock, later: float
) -> None:
    if judge_node(f, c).act is Act.LOST:
        after = Clock(c.now + later, c.since, c.lost_after_s, c.overdue)
        assert judge_node(f, after).act is Act.LOST


@given(node_facts(), clocks())
def test_a_restarted_server_condemns_no_live_runner_at_once(f: NodeFacts, c: Clock) -> None:
    restarted = Clock(c.now, c.now, c.lost_after_s, c.overdue)
    if f.alive is True:
        assert judge_node(f, restarted).act is not Act.LOST


@given(node_facts(), clocks())
def test_only_an_unrecorded_start_is_adopted_and_only_a_live_overdue_one_is_forced(
    f: NodeFacts, c: Clock
) -> None:
    v = judge_node(f, c)
    if v.act is Act.ADOPT:
        assert f.ref is None and v.ref == f.adoptable and f.exit_record is None
    if v.act is Act.FORCE:
        assert c.overdue and f.alive is True


# ---- one attempt: decide ----------------------------------------------------------------------


@st.composite
def attempt_nodes(draw: st.DrawFn) -> dict[int, NodeRecord]:
    count = draw(st.integers(1, 4))
    nodes: dict[int, NodeRecord] = {}
    for rank in range(count):
        state = draw(st.sampled_from(STATES))
        node = NodeRecord(state=state)
        if state is NodeState.EXITED:
            lost = draw(st.booleans())
            code = None if lost else draw(st.sampled_from([0, 1, 137, 143]))
            node = node.model_copy(update={"lost": lost, "exit_code": code})
        nodes[rank] = node
    return nodes


ACTIVE_STATUSES = [S.STARTING, S.RUNNING, S.STOPPING, S.PAUSING]


@given(st.sampled_from(ACTIVE_STATUSES), attempt_nodes())
def test_every_ending_is_a_transition_the_table_allows(
    status: S, nodes: dict[int, NodeRecord]
) -> None:
    d = decide(status, nodes)
    if d is not None:
        assert d.status in TRANSITIONS[status]


@given(st.sampled_from(ACTIVE_STATUSES), attempt_nodes())
def test_success_needs_every_node_to_exit_zero(status: S, nodes: dict[int, NodeRecord]) -> None:
    d = decide(status, nodes)
    if d is not None and d.status is S.SUCCEEDED:
        assert all(n.exited and n.exit_code == 0 for n in nodes.values())


@given(attempt_nodes())
def test_a_stopping_run_ends_stopped_and_a_pausing_one_paused_or_failed(
    nodes: dict[int, NodeRecord],
) -> None:
    stopped = decide(S.STOPPING, nodes)
    assert stopped is None or stopped.status is S.STOPPED
    paused = decide(S.PAUSING, nodes)
    assert paused is None or paused.status in (S.PAUSED, S.FAILED)
    if paused is not None and paused.status is S.PAUSED:
        assert all(n.exited for n in nodes.values())


@given(st.sampled_from([S.STARTING, S.RUNNING]), attempt_nodes())
def test_an_attempt_goes_on_exactly_while_nothing_failed_and_a_node_runs(
    status: S, nodes: dict[int, NodeRecord]
) -> None:
    exited = [n for n in nodes.values() if n.exited]
    failed = [n for n in exited if n.lost or n.exit_code != 0]
    assert (decide(status, nodes) is None) == (not failed and len(exited) < len(nodes))


# ---- the service, on a real database ----------------------------------------------------------


class KillingExecutor(FakeExecutor):
    """The fake executor plus the optional capabilities of the local one."""

    def __init__(self) -> None:
        super().__init__()
        self.killed: list[str] = []
        self.live_pids: set[int] = set()

    def kill(self, ref: str) -> None:
        self.killed.append(ref)
        self.alive.discard(ref)

    def adopt(self, record: dict[str, object]) -> str | None:
        pid = record.get("pid")
        return f"fake:pid-{pid}" if pid in self.live_pids else None


@pytest.fixture
def executor() -> KillingExecutor:
    return KillingExecutor()


def backdate(rt: Runtime, run_id: str, *, beat_s: float = 0, server_s: float = 0) -> None:
    """Pretend the node last beat ``beat_s`` ago and the server started ``server_s`` ago."""
    rt.started_at = utcnow() - timedelta(seconds=server_s)
    with rt.transaction() as session:
        run = session.get(Run, run_id)
        assert run is not None and run.current is not None
        when = (utcnow() - timedelta(seconds=beat_s)).timestamp()
        assert statemachine.node_event(run.current, 0, NodeEvent.HEARTBEAT, beat=when)


def test_a_live_runner_that_stops_beating_is_lost_killed_and_retried_from_its_checkpoint(
    rt: Runtime, executor: KillingExecutor
) -> None:
    run_id = running_run(rt)
    ref = executor.started[0][0]
    beat(rt, run_id)
    checkpoint(rt, run_id, "step-20")
    backdate(rt, run_id, beat_s=rt.settings.lost_after_s + 5, server_s=3600)
    reconcile.reconcile(rt)
    run = run_row(rt, run_id)
    assert (run.status, run.auto_retries) == ("queued", 1)
    first = run.attempts[0]
    assert (
        first.end_reason == "node_lost" and "no heartbeat for 35 s" in first.node_records()[0].why
    )
    assert executor.killed == [ref]
    assert (
        run.events[-1].reason == "auto-retry 1 of 2 after node_lost: resumes from step-20 (step 20)"
    )


def test_silence_while_the_server_was_down_does_not_count(
    rt: Runtime, executor: KillingExecutor
) -> None:
    run_id = running_run(rt)
    beat(rt, run_id)
    backdate(rt, run_id, beat_s=3600, server_s=1)  # quiet for an hour, but we just started
    reconcile.reconcile(rt)
    assert run_row(rt, run_id).status == "running" and executor.killed == []


def test_a_runner_that_never_beat_is_judged_by_its_process_alone(rt: Runtime) -> None:
    run_id = running_run(rt)
    rt.started_at = utcnow() - timedelta(hours=1)
    reconcile.reconcile(rt)
    assert run_row(rt, run_id).status == "running"


def test_an_exit_record_finishes_the_attempt_even_if_the_report_never_came(
    rt: Runtime, executor: KillingExecutor
) -> None:
    run_id = running_run(rt)
    exit_record(rt, run_id, 0)  # the runner is still alive, retrying its report
    reconcile.reconcile(rt)
    run = run_row(rt, run_id)
    assert (run.status, run.exit_code, run.events[-1].actor) == ("succeeded", 0, "reconciler")
    assert not report(rt, run_id, "exited", exit_code=0).accepted  # the late report changes nothing


def test_a_start_the_server_died_before_recording_is_adopted_not_started_again(
    rt: Runtime, executor: KillingExecutor
) -> None:
    run_id = submit(rt).run_id
    dispatch.schedule_pass(rt)  # committed placement; the server died before starting or recording
    runner_record(rt, run_id, pid=4242)
    executor.live_pids.add(4242)
    executor.alive.add("fake:pid-4242")
    reconcile.reconcile(rt)
    run = run_row(rt, run_id)
    assert run.status == "starting" and run.attempts[0].node_records()[0].ref == "fake:pid-4242"
    assert run.attempts[0].executor_ref == "fake:pid-4242"
    assert executor.started == []  # nothing started twice
    report(rt, run_id, "running")
    assert run_row(rt, run_id).status == "running"


def test_a_runner_record_of_a_dead_process_means_the_start_failed(rt: Runtime) -> None:
    run_id = submit(rt).run_id
    dispatch.schedule_pass(rt)
    runner_record(rt, run_id, pid=4243)
    reconcile.reconcile(rt)
    assert run_row(rt, run_id).end_reason == "startup_failed"


def test_a_stop_whose_sigkill_died_with_the_old_server_is_forced(
    rt: Runtime, executor: KillingExecutor
) -> None:
    run_id = running_run(rt)
    actions.stop(rt, member("alice"), run_id)
    with rt.transaction() as session:
        run = session.get(Run, run_id)
        assert run is not None
        run.updated_at = utcnow() - timedelta(hours=1)
    reconcile.reconcile(rt)
    assert executor.killed == [executor.started[0][0]]
    assert run_row(rt, run_id).status == "stopping"  # its exit (or loss) will end it
    executor.die(executor.started[0][0])
    reconcile.reconcile(rt)
    assert run_row(rt, run_id).status == "stopped"


def test_reconciling_twice_changes_nothing_more(rt: Runtime, executor: KillingExecutor) -> None:
    run_id = running_run(rt, profiles=["h200:16"])
    executor.die(executor.started[1][0])
    reconcile.reconcile(rt)
    once = run_row(rt, run_id)
    reconcile.reconcile(rt)
    twice = run_row(rt, run_id)
    assert (once.status, len(once.events)) == (twice.status, len(twice.events)) == ("failed", 4)
    assert Path(once.attempts[0].log_path).name == "attempt-1.log"


def test_a_live_runner_that_just_exited_reports_for_itself(rt: Runtime) -> None:
    run_id = running_run(rt)
    exit_record(rt, run_id, 0, age_s=0.0)  # written a moment ago; the runner is still alive
    reconcile.reconcile(rt)
    assert run_row(rt, run_id).status == "running"
    report(rt, run_id, "exited", exit_code=0)
    run = run_row(rt, run_id)
    assert (run.status, run.events[-1].actor) == ("succeeded", "runner:0")
