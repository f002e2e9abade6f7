"""GPU-hour accounting and the daily GPU-hour quota, through the services on a real database.

Figures are checked against the attempts' own recorded start and end times × their GPUs."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from sqlalchemy import select

from starforge.contract.states import JobStatus
from starforge.server.db.labops import UsageSummary
from starforge.server.db.models import Attempt, Run, utcnow
from starforge.server.runtime import Runtime
from starforge.server.services.access import users
from starforge.server.services.runs import jobs
from starforge.server.services.scheduling import accounting

from .factories import member, report, run_row, running_run, schedule, submit


@pytest.fixture
def admin(rt: Runtime) -> users.Caller:
    with rt.transaction() as session:
        users.make_admin(session, "alice")
        return users.authenticate(session, "Bearer alice-token")


def set_times(rt: Runtime, run_id: str, start: datetime, end: datetime | None) -> None:
    """Place the run's first attempt at known times (as if it ran then)."""
    with rt.transaction() as session:
        attempt = session.scalars(select(Attempt).where(Attempt.run_id == run_id)).one()
        attempt.started_at, attempt.ended_at = start, end


def ended_at_known_times(
    rt: Runtime, user: str, profile: str, start: datetime, end: datetime
) -> str:
    """A placed run whose attempt ran from ``start`` to ``end``, ended as the lifecycle ends one
    (its times and its usage summary in one transaction), at times a test chooses."""
    run_id = running_run(rt, user=user, profiles=[profile])
    with rt.transaction() as session:
        run = session.get(Run, run_id)
        assert run is not None and run.current is not None
        attempt = run.current
        attempt.started_at, attempt.ended_at = start, end
        accounting.attempt_ended(
            session.connection(), run.user, run.project, run.pools, attempt.allocation, start, end
        )
    return run_id


def finished_run(rt: Runtime, user: str, profile: str) -> str:
    run_id = running_run(rt, user=user, profiles=[profile])
    report(rt, run_id, "exited", exit_code=0)
    assert run_row(rt, run_id).status == JobStatus.SUCCEEDED
    return run_id


def test_gpu_hours_are_the_gpus_times_the_attempts_own_recorded_wall_time(
    rt: Runtime, admin: users.Caller
) -> None:
    run_id = finished_run(rt, "bob", "h200:2")
    attempt = run_row(rt, run_id).attempts[0]
    assert attempt.started_at is not None and attempt.ended_at is not None
    expected = 2 * (attempt.ended_at - attempt.started_at).total_seconds() / 3600
    found = accounting.report(rt, by="user")
    assert [(r.user, r.gpu_hours) for r in found.rows] == [("bob", pytest.approx(expected))]
    assert found.total_gpu_hours == pytest.approx(expected)


def test_an_attempt_across_midnight_is_split_between_the_two_utc_days(
    rt: Runtime, admin: users.Caller
) -> None:
    day = datetime(2026, 3, 1, tzinfo=UTC)
    ended_at_known_times(
        rt, "bob", "h200:4", day + timedelta(hours=22.5), day + timedelta(hours=25)
    )
    ended_at_known_times(
        rt, "alice", "h100:8", day + timedelta(hours=33), day + timedelta(hours=33.25)
    )
    rows = accounting.report(rt).rows
    assert [(r.day, r.user, r.project, r.gpu_hours) for r in rows] == [
        (date(2026, 3, 1), "bob", "proj", 6.0),  # 4 GPUs × 1.5 h before midnight
        (date(2026, 3, 2), "alice", "proj", 2.0),  # 8 GPUs × 0.25 h
        (date(2026, 3, 2), "bob", "proj", 4.0),  # 4 GPUs × 1 h after it
    ]
    since = accounting.report(rt, by="project", since=date(2026, 3, 2))
    assert [(r.project, r.gpu_hours) for r in since.rows] == [("proj", 6.0)]


def test_my_usage_counts_a_running_attempt_up_to_now(rt: Runtime) -> None:
    run_id = running_run(rt, user="bob", profiles=["h200:8"])
    start = utcnow() - timedelta(minutes=30)
    set_times(rt, run_id, start, None)
    before = utcnow()
    mine = accounting.mine(rt, "bob")
    after = utcnow()
    midnight = datetime.combine(before.date(), datetime.min.time(), tzinfo=UTC)

    def hours(since: datetime, until: datetime) -> float:
        return 8 * (until - since).total_seconds() / 3600

    assert hours(start, before) <= mine.total <= hours(start, after)
    today_from = max(start, midnight)  # the part before midnight UTC counts for yesterday
    assert hours(today_from, before) <= mine.today <= hours(today_from, after)
    assert mine.daily_quota is None


def test_a_user_past_the_daily_quota_waits_with_the_reason_and_running_runs_go_on(
    rt: Runtime, admin: users.Caller
) -> None:
    running = running_run(rt, user="bob", profiles=["h200:4"])
    set_times(rt, running, utcnow() - timedelta(minutes=30), None)
    used = accounting.mine(rt, "bob").today
    assert used > 0
    accounting.set_daily_quota(rt, admin.name, "bob", used / 2)  # bob's day is spent
    waiting = submit(rt, "bob", profiles=["h100:1"]).run_id
    assert schedule(rt) == []  # h100 is free; bob's day is spent
    view = jobs.get(rt, member("bob"), waiting)
    assert view.status is JobStatus.QUEUED
    assert view.reason.startswith("your daily GPU-hour quota is used up: ")
    assert f"of {used / 2:g} GPU-hours today (UTC)" in view.reason
    assert view.pending is not None and view.pending.blocker == "held"
    assert run_row(rt, waiting).reason == view.reason  # stored for `sf job ls` too
    assert run_row(rt, running).status == JobStatus.RUNNING  # never killed for it
    other = submit(rt, "alice", profiles=["h100:1"]).run_id
    assert schedule(rt) == [other]  # another user's run is not held

    accounting.set_daily_quota(rt, admin.name, "bob", None)
    assert schedule(rt) == [waiting]


def test_an_attempt_that_ends_is_kept_in_the_usage_summaries_as_its_gpus_times_its_wall_time(
    rt: Runtime,
) -> None:
    run_id = finished_run(rt, "bob", "h200:2")
    attempt = run_row(rt, run_id).attempts[0]
    assert attempt.started_at is not None and attempt.ended_at is not None
    with rt.transaction() as session:
        kept = [
            (s.day, s.user, s.project, s.series, s.gpu_hours) for s in session.query(UsageSummary)
        ]
    assert {(user, project, series) for _, user, project, series, _ in kept} == {
        ("bob", "proj", "h200")
    }
    assert {day for day, *_ in kept} <= {attempt.started_at.date(), attempt.ended_at.date()}
    wall = (attempt.ended_at - attempt.started_at).total_seconds() / 3600
    assert sum(hours for *_, hours in kept) == pytest.approx(2 * wall)


def test_usage_adds_the_attempts_still_running_up_to_now_to_those_that_ended(
    rt: Runtime, admin: users.Caller
) -> None:
    day = datetime(2026, 3, 1, tzinfo=UTC)
    ended_at_known_times(rt, "bob", "h200:4", day, day + timedelta(hours=2))  # 8 GPU-hours
    running = running_run(rt, user="bob", profiles=["h200:2"])
    start = utcnow() - timedelta(hours=1)
    set_times(rt, running, start, None)
    before = utcnow()
    found = accounting.report(rt, by="user")
    after = utcnow()
    (row,) = found.rows
    assert row.user == "bob"
    low, high = (2 * (t - start).total_seconds() / 3600 for t in (before, after))
    assert 8 + low <= row.gpu_hours <= 8 + high
    assert (
        8 + low
        <= accounting.mine(rt, "bob").total
        <= 8 + (2 * (utcnow() - start).total_seconds() / 3600)
    )
