from __future__ import annotations

from starforge.contract.states import TERMINAL, TRANSITIONS, JobStatus


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
