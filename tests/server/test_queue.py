"""The scheduler pass's read of the queue: a run is parsed once and again only when its row
changed, and the latest plan is kept only while nothing it was computed from has changed (the
queue, what runs hold, limits, holds, and which runs have outwaited the fair-share patience)."""

from __future__ import annotations

from sqlalchemy import update

from starforge.contract.states import JobStatus
from starforge.server.db.models import Run
from starforge.server.runtime import Runtime
from starforge.server.services.runs import actions, jobs
from starforge.server.services.scheduling import queue

from .factories import member, schedule, submit


def places(rt: Runtime, runs: list[tuple[str, str]]) -> list[int | None]:
    """Each (user, run) as its owner sees it: its place in the queue."""
    return [jobs.get(rt, member(user), run_id).queue_position for user, run_id in runs]


def test_a_pass_that_finds_nothing_new_explains_the_queue_as_the_latest_one_did(
    rt: Runtime,
) -> None:
    holder = submit(rt, profiles=["h200:16"]).run_id
    assert schedule(rt) == [holder]
    waiting = [(user, submit(rt, user, profiles=["h200:8"]).run_id) for user in ("alice", "bob")]
    assert schedule(rt) == []
    before = [jobs.get(rt, member(user), run_id) for user, run_id in waiting]
    latest = rt.queue_pass
    assert queue.needs_pass(rt)  # the h100 node is free: every tick makes a pass
    assert schedule(rt) == []
    assert rt.queue_pass is not latest  # a pass was made, and it says the same
    after = [jobs.get(rt, member(user), run_id) for user, run_id in waiting]
    assert [(v.queue_position, v.reason, v.pending) for v in after] == [
        (v.queue_position, v.reason, v.pending) for v in before
    ]
    assert [v.queue_position for v in after] == [2, 1]  # bob holds nothing: fair share


def test_a_run_stopped_between_two_passes_leaves_the_queue_and_the_runs_behind_it_move_up(
    rt: Runtime,
) -> None:
    holder = submit(rt, profiles=["h200:16"]).run_id
    assert schedule(rt) == [holder]
    first, second, third = (("alice", submit(rt, profiles=["h200:8"]).run_id) for _ in range(3))
    assert schedule(rt) == []
    assert places(rt, [first, second, third]) == [1, 2, 3]
    actions.stop(rt, member("alice"), second[1])
    assert schedule(rt) == []
    assert places(rt, [first, third]) == [1, 2]
    assert jobs.get(rt, member("alice"), second[1]).status != JobStatus.QUEUED


def test_a_queued_run_whose_row_changed_between_passes_is_planned_as_it_is_now(
    rt: Runtime,
) -> None:
    holder = submit(rt, profiles=["h200:16"]).run_id
    assert schedule(rt) == [holder]
    early, late = (("alice", submit(rt, profiles=["h200:8"]).run_id) for _ in range(2))
    assert schedule(rt) == []
    assert places(rt, [early, late]) == [1, 2]
    with rt.transaction() as session:  # nothing but the row changed: no wake-up, no arrival
        session.execute(update(Run).where(Run.id == late[1]).values(priority=5))
    assert schedule(rt) == []
    assert places(rt, [early, late]) == [2, 1]


def test_a_run_that_outwaits_the_patience_between_two_passes_goes_ahead_of_fair_share(
    rt: Runtime,
) -> None:
    holder = submit(rt, profiles=["h200:8"]).run_id  # alice holds 8 GPUs
    assert schedule(rt) == [holder]
    older = ("alice", submit(rt, profiles=["h200:16"]).run_id)
    newer = ("bob", submit(rt, "bob", profiles=["h200:16"]).run_id)
    assert schedule(rt) == []
    assert places(rt, [older, newer]) == [2, 1]  # bob holds nothing: fair share puts him first
    # Time passing, without any other change: both runs have now waited longer than the
    # patience, so the older goes first.
    rt.settings.fair_share_patience_s = 0.0
    assert schedule(rt) == []
    assert places(rt, [older, newer]) == [1, 2]
