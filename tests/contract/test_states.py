"""The transition table as data: its shape, the actions it allows, and the diagram in docs/."""

from __future__ import annotations

import re
from pathlib import Path

from starforge.contract.states import (
    PAUSABLE,
    RESUMABLE,
    RETRYABLE,
    STOPPABLE,
    TERMINAL,
    TRANSITIONS,
    JobStatus,
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
