"""Quotas through the services: set by admins, queued-not-failed when in use, rejected at submit
when they can never allow a run, and "why pending" in numbers on the run's view."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from starforge.contract.api import QuotaUpdate
from starforge.contract.errors import QuotaRejected, UsageError, UserNotFound
from starforge.contract.states import JobStatus
from starforge.server.db.models import Run
from starforge.server.runtime import Runtime
from starforge.server.services.access import users
from starforge.server.services.runs import jobs
from starforge.server.services.scheduling import queue, quotas, usage

from .factories import member, report, request, run_row, schedule, submit


@pytest.fixture
def admin(rt: Runtime) -> str:
    with rt.transaction() as session:
        users.make_admin(session, "alice")
    return "alice"


def set_quota(rt: Runtime, user: str, **fields: object) -> None:
    quotas.set_quota(rt, "alice", user, QuotaUpdate(**fields))  # type: ignore[arg-type]


def finish(rt: Runtime, run_id: str, nodes: int = 1) -> None:
    for rank in range(nodes):
        report(rt, run_id, "exited", exit_code=0, rank=rank)


def test_a_run_over_its_quota_is_queued_with_the_numbers_and_starts_when_the_quota_frees(
    rt: Runtime, admin: str
) -> None:
    set_quota(rt, "bob", max_gpus_per_series={"h200": 8})
    first = submit(rt, "bob").run_id
    assert schedule(rt) == [first]
    second = submit(rt, "bob")
    assert second.status is JobStatus.QUEUED and second.created  # queued, not failed
    assert schedule(rt) == []  # h200-2 is free, but the quota is in use
    view = jobs.get(rt, member("bob"), second.run_id)
    assert view.reason == f"your quota: 8 of 8 h200 GPUs in use by runs {first}; this run needs 8"
    assert view.pending is not None and view.pending.blocker == "quota"
    assert view.pending.next_event == f"when {first} ends"
    assert run_row(rt, second.run_id).reason == view.reason  # the pass stored it too
    finish(rt, first)
    assert schedule(rt) == [second.run_id]


def test_a_profile_the_quota_excludes_is_rejected_at_submit_and_creates_nothing(
    rt: Runtime, admin: str
) -> None:
    set_quota(rt, "bob", allowed_profiles=["h200"])
    with pytest.raises(QuotaRejected) as err:
        submit(rt, "bob", profiles=["h100:2"])
    assert "does not allow profile h100 (allowed: h200)" in err.value.message
    assert "sf admin quota set" in (err.value.hint or "")
    with rt.transaction() as session:
        assert session.scalar(select(func.count()).select_from(Run)) == 0


def test_a_run_bigger_than_the_quota_is_rejected_with_the_numbers(rt: Runtime, admin: str) -> None:
    set_quota(rt, "bob", max_gpus=8)
    with pytest.raises(QuotaRejected, match="the run needs 16 GPUs but your quota allows 8"):
        submit(rt, "bob", profiles=["h200:16"])


def test_the_servers_default_quota_applies_to_users_without_their_own(
    rt: Runtime, admin: str
) -> None:
    rt.settings.quota_defaults.max_runs = 1
    first = submit(rt, "bob").run_id
    second = submit(rt, "bob").run_id
    assert schedule(rt) == [first]
    assert (
        jobs.get(rt, member("bob"), second).reason
        == f"your quota: 1 of 1 runs at once in use ({first})"
    )
    set_quota(rt, "bob", max_runs=None)  # an own quota: no run limit
    assert schedule(rt) == [second]


def test_quotas_are_set_only_for_users_that_exist(rt: Runtime, admin: str) -> None:
    with pytest.raises(UserNotFound) as err:
        set_quota(rt, "bobby", max_gpus=1)
    assert "alice, bob" in (err.value.hint or "")
    with pytest.raises(UsageError, match="unknown profile"):
        set_quota(rt, "bob", allowed_profiles=["b200"])
    with pytest.raises(UsageError, match="unknown GPU series"):
        set_quota(rt, "bob", max_gpus_per_series={"b200": 8})


def test_an_update_changes_only_what_it_names_and_null_lifts_a_limit(
    rt: Runtime, admin: str
) -> None:
    set_quota(rt, "bob", max_gpus=16, max_runs=2, max_gpus_per_series={"h200": 8}, priority=3)
    set_quota(rt, "bob", max_runs=None, max_gpus_per_series={"h100": 4})
    found = usage.get(rt, "bob")
    assert not found.default
    assert found.quota.model_dump() == {
        "max_gpus": 16,
        "max_gpus_per_series": {"h100": 4, "h200": 8},
        "max_runs": None,
        "allowed_profiles": None,
        "priority": 3,
    }
    set_quota(rt, "bob", max_gpus_per_series={"h200": None})
    assert usage.get(rt, "bob").quota.max_gpus_per_series == {"h100": 4}
    set_quota(rt, "bob", reset=True)
    assert usage.get(rt, "bob").default


def test_a_users_priority_orders_their_new_and_already_queued_runs(rt: Runtime, admin: str) -> None:
    blocker = submit(rt, "carol", profiles=["h200:16"]).run_id
    assert schedule(rt) == [blocker]
    early = submit(rt, profiles=["h200:16"]).run_id
    late = submit(rt, "bob", profiles=["h200:16"]).run_id
    owners = (("alice", early), ("bob", late))
    assert [jobs.get(rt, member(u), r).queue_position for u, r in owners] == [1, 2]
    set_quota(rt, "bob", priority=10)
    assert jobs.get(rt, member("bob"), late).queue_position == 1
    assert submit(rt, "bob", profiles=["h200:8"]).queue_position == 2  # bob's priority at submit
    finish(rt, blocker, nodes=2)
    assert schedule(rt) == [late]


def test_the_submit_answer_places_a_run_by_priority_and_age_and_its_view_by_fair_share(
    rt: Runtime,
) -> None:
    blocker = submit(rt, profiles=["h200:16"]).run_id
    assert schedule(rt) == [blocker]
    answers = [submit(rt, user, profiles=["h200:8"]) for user in ("alice", "alice", "bob")]
    assert [a.queue_position for a in answers] == [1, 2, 3]
    assert schedule(rt) == []  # the scheduler's pass decides (and explains) the queue
    live = {
        r.run_id: r.queue_position
        for user in ("alice", "bob")
        for r in jobs.page(rt, member(user)).runs
        if r.status == JobStatus.QUEUED
    }
    # alice holds 16 GPUs and bob none: the scheduler considers bob's run first.
    assert [live[a.run_id] for a in answers] == [2, 3, 1]


def test_for_a_single_user_the_submit_answer_and_the_view_agree(rt: Runtime) -> None:
    submit(rt, profiles=["h200:16"])
    schedule(rt)
    answers = [submit(rt, profiles=["h200:8"]) for _ in range(3)]
    assert [a.queue_position for a in answers] == [1, 2, 3]
    assert [jobs.get(rt, member("alice"), a.run_id).queue_position for a in answers] == [1, 2, 3]


def test_why_pending_names_the_blocking_run_and_the_event_that_lets_the_head_start(
    rt: Runtime,
) -> None:
    holder = submit(rt, "bob", profiles=["h200:8"]).run_id  # bob's own: named to him
    assert schedule(rt) == [holder]
    wide = submit(rt, "bob", profiles=["h200:16"]).run_id
    narrow = submit(rt, "bob", profiles=["h200:8"]).run_id
    schedule(rt)
    view = jobs.get(rt, member("bob"), wide)
    assert view.pending is not None
    assert (view.queue_position, view.pending.blocker) == (1, "capacity")
    assert view.pending.detail == (
        "needs 2 nodes with 8 free h200 GPUs; 1 has them (h200-2); "
        f"h200-1 has 0 free, 8 used by {holder} until it ends"
    )
    assert view.pending.next_event == f"when {holder} ends"
    assert view.pending.reserved_nodes == ["h200-1", "h200-2"]
    behind = jobs.get(rt, member("bob"), narrow)
    assert behind.pending is not None and behind.pending.blocker == "reserved"
    assert f"waiting behind {wide}" in behind.reason
    finish(rt, holder)
    assert schedule(rt) == [wide]


def test_a_reason_stored_by_a_pass_never_overwrites_a_run_that_left_the_queue(
    rt: Runtime,
) -> None:
    blocker = submit(rt, profiles=["h200:16"]).run_id
    waiting = submit(rt, profiles=["h200:16"]).run_id
    snap = queue.read_snapshot(rt)
    decisions = queue.decide(rt, snap)
    with rt.transaction() as session:  # the run leaves the queue between decision and store
        run = session.get(Run, waiting)
        assert run is not None
        run.status, run.reason = JobStatus.STOPPED.value, "stopped by user"
    queue.save_reasons(rt, snap, decisions)
    assert run_row(rt, waiting).reason == "stopped by user"
    assert blocker


def test_cluster_status_and_my_usage_count_what_active_runs_hold(rt: Runtime) -> None:
    mine = submit(rt, profiles=["h200:4"]).run_id
    other = submit(rt, "bob", profiles=["h100:8"]).run_id
    waiting = submit(rt, profiles=["h200:16"]).run_id
    assert sorted(schedule(rt)) == sorted([mine, other])
    cluster = usage.cluster_status(rt)
    assert [(s.series, s.total, s.used, s.free) for s in cluster.series] == [
        ("h100", 8, 8, 0),
        ("h200", 16, 4, 12),
    ]
    assert [(n.name, n.used, n.runs) for n in cluster.nodes] == [
        ("h200-1", 4, [mine]),
        ("h200-2", 0, []),
        ("h100-1", 8, [other]),
    ]
    assert (cluster.queued, cluster.active) == (1, 2)
    mine_now = usage.my_usage(rt, "alice")
    held = mine_now.usage
    assert (held.gpus, held.gpus_by_series, held.runs) == (4, {"h200": 4}, 1)
    assert [(r.run_id, r.nodes) for r in mine_now.active] == [(mine, ["h200-1"])]
    assert [(r.run_id, r.queue_position) for r in mine_now.queued_runs] == [(waiting, 1)]
    assert mine_now.queued_runs[0].reason.startswith("waiting for 2 nodes with 8 free h200 GPUs")


def test_a_request_for_an_unknown_user_quota_is_not_found(rt: Runtime, admin: str) -> None:
    with pytest.raises(UserNotFound):
        usage.get(rt, "nobody")
    assert jobs.submit(rt, "bob", request(rt)).created


def test_reading_a_queued_run_shows_the_latest_pass_and_never_plans_again(rt: Runtime) -> None:
    holder = submit(rt, "bob", profiles=["h200:16"]).run_id
    waiting = submit(rt, "bob", profiles=["h200:8"]).run_id
    assert schedule(rt) == [holder]
    last = rt.queue_pass
    assert last is not None
    views = [jobs.get(rt, member("bob"), waiting) for _ in range(3)]
    listed = [v for v in jobs.page(rt, member("bob")).runs if v.run_id == waiting]
    assert rt.queue_pass is last  # no read made a pass of its own
    assert views[0].pending is not None and views[0].pending.next_event == f"when {holder} ends"
    assert views[0].reason == last.decisions[waiting].reason == run_row(rt, waiting).reason
    assert listed[0].reason == views[0].reason and listed[0].queue_position == 1
    # A run submitted since that pass shows its stored reason and its place by priority and
    # age until the next pass, which explains it.
    later = submit(rt, "bob", profiles=["h200:8"]).run_id
    fresh = jobs.get(rt, member("bob"), later)
    assert (fresh.reason, fresh.queue_position, fresh.pending) == (
        "waiting for the scheduler",
        2,
        None,
    )
    assert rt.queue_pass is last
    schedule(rt)
    assert rt.queue_pass is not last
    explained = jobs.get(rt, member("bob"), later)
    assert explained.pending is not None and explained.queue_position == 2
    assert explained.reason == run_row(rt, later).reason != "waiting for the scheduler"


def test_a_full_cluster_is_explained_once_per_change_not_on_every_tick(rt: Runtime) -> None:
    held = [submit(rt, profiles=[p]).run_id for p in ("h200:16", "h100:8")]
    assert sorted(schedule(rt)) == sorted(held)
    waiting = submit(rt, profiles=["h200:8"]).run_id  # a wake-up: the queue changed
    assert not queue.any_gpu_free(rt)
    assert queue.needs_pass(rt)
    schedule(rt)
    explained = rt.queue_pass
    assert explained is not None and waiting in explained.decisions
    assert not queue.needs_pass(rt)  # nothing changed and nothing is free: skip the next tick
    schedule(rt)
    assert rt.queue_pass is explained


def test_reading_the_queue_takes_no_write_lock_while_a_submit_holds_it(rt: Runtime) -> None:
    waiting = submit(rt, profiles=["h200:16"]).run_id
    with rt.transaction() as session:  # a writer in the middle of its transaction
        run = session.get(Run, waiting)
        assert run is not None
        run.priority = 5
        session.flush()
        snap = queue.read_snapshot(rt)  # would wait for the writer (then fail) under a lock
        assert [(q.id, q.priority) for q in snap.queue] == [(waiting, 0)]  # the committed state
    assert [q.priority for q in queue.read_snapshot(rt).queue] == [5]
