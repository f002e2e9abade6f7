"""The transition tables as data: the run's (its shape, the actions it allows, the diagram in
docs/) and each node's."""

from __future__ import annotations

import re
from pathlib import Path

from starforge.contract.states import (
    NODE_TRANSITIONS,
    PAUSABLE,
    RESUMABLE,
    RETRYABLE,
    STOPPABLE,
    TERMINAL,
    TRANSITIONS,
    JobStatus,
    NodeEvent,
    NodeState,
    next_node_state,
)


def test_every_status_has_a_row_in_the_transition_table() -> None:
    assert set(TRANSITIONS) == set(JobStatus)


def test_terminal_statuses_are_left_only_by_retry() -> None:
    for status in TERMINAL:
        assert TRANSITIONS[status] <= {JobStatus.QUEUED}


def test_every_status_is_reachable_from_queued() -> None:
    seen, frontier = {JobStatus.QUEUED}, [JobStatus.QUEUED]
    while frontier:
        for nxt in TRANSITIONS[frontier.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                frontier.append(nxt)
    assert seen == set(JobStatus)


def test_the_diagram_in_docs_draws_exactly_the_transition_table() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "states.md").read_text()
    diagram = text.split("```mermaid", 1)[1].split("```", 1)[0]
    edges = set()
    for line in diagram.splitlines():
        match = re.match(r"\s*(\w+) --> (\w+)", line)
        if match and "[*]" not in line:
            edges.add((JobStatus(match.group(1)), JobStatus(match.group(2))))
    table = {(src, dst) for src, dsts in TRANSITIONS.items() for dst in dsts}
    assert edges == table


def test_each_user_action_starts_only_where_the_table_lets_it_go() -> None:
    for status in STOPPABLE:
        assert TRANSITIONS[status] & {JobStatus.STOPPING, JobStatus.STOPPED}
    for status in PAUSABLE:
        assert TRANSITIONS[status] & {JobStatus.PAUSING, JobStatus.PAUSED}
    for status in RESUMABLE | RETRYABLE:
        assert JobStatus.QUEUED in TRANSITIONS[status]
    assert not (RESUMABLE & RETRYABLE)
    assert not any(s.is_terminal for s in PAUSABLE | STOPPABLE)


def test_paused_holds_nothing_and_is_not_final() -> None:
    assert not JobStatus.PAUSED.is_active and not JobStatus.PAUSED.is_terminal


# ---- nodes ------------------------------------------------------------------------------------


def test_every_node_state_has_a_row_and_every_move_lands_on_a_node_state() -> None:
    assert set(NODE_TRANSITIONS) == set(NodeState)
    for state in NodeState:
        for event in NodeEvent:
            assert next_node_state(state, event) == NODE_TRANSITIONS[state].get(event)


def test_an_exited_node_never_moves_again() -> None:
    assert set(NODE_TRANSITIONS[NodeState.EXITED].values()) <= {NodeState.EXITED}
    for event in (NodeEvent.EXITED, NodeEvent.LOST, NodeEvent.HEARTBEAT, NodeEvent.RUNNING):
        assert next_node_state(NodeState.EXITED, event) is None


def test_a_heartbeat_never_changes_a_node_state_and_no_runner_event_moves_it_back() -> None:
    order = list(NodeState)
    for state, row in NODE_TRANSITIONS.items():
        if NodeEvent.HEARTBEAT in row:
            assert row[NodeEvent.HEARTBEAT] is state
        for dst in row.values():
            assert order.index(dst) >= order.index(state)


def test_every_node_state_is_reachable_from_pending_and_every_live_node_can_end() -> None:
    seen, frontier = {NodeState.PENDING}, [NodeState.PENDING]
    while frontier:
        for nxt in NODE_TRANSITIONS[frontier.pop()].values():
            if nxt not in seen:
                seen.add(nxt)
                frontier.append(nxt)
    assert seen == set(NodeState)
    for state in set(NodeState) - {NodeState.EXITED}:
        assert NODE_TRANSITIONS[state][NodeEvent.LOST] is NodeState.EXITED
        assert NODE_TRANSITIONS[state][NodeEvent.EXITED] is NodeState.EXITED


def test_a_runners_events_are_node_events() -> None:
    from typing import get_args

    from starforge.contract.api import LifecycleEvent

    literal = LifecycleEvent.model_fields["event"].annotation
    assert set(get_args(literal)) <= {e.value for e in NodeEvent}


def test_the_node_diagram_in_docs_draws_exactly_the_moves_of_the_node_table() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "states.md").read_text()
    diagram = text.split("## Node states", 1)[1].split("```mermaid", 1)[1].split("```", 1)[0]
    drawn = set()
    for line in diagram.splitlines():
        match = re.match(r"\s*(\w+) --> (\w+): (.+)", line)
        if match:
            src, dst = NodeState(match.group(1)), NodeState(match.group(2))
            drawn |= {(src, NodeEvent(e.strip()), dst) for e in match.group(3).split("/")}
    moves = {
        (src, event, dst)
        for src, row in NODE_TRANSITIONS.items()
        for event, dst in row.items()
        if dst is not src
    }
    assert drawn == moves
