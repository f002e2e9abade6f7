"""GPU-hours and cost per run and per attempt: the one computation
(services/scheduling/accounting.py) as a run's view and ``sf admin usage --by run`` read it, on a
real database.

This module's server prices h200 GPU-hours at 3.0 USD and h100 not at all."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from sqlalchemy import select

from starforge.contract.states import JobStatus
from starforge.server.db.models import Attempt, utcnow
from starforge.server.runtime import Runtime
from starforge.server.services.runs import actions, jobs
from starforge.server.services.scheduling import accounting
from starforge.server.settings import Settings

from .factories import member, report, run_row, running_run, schedule

H200_PRICE = 3.0


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"gpu_hour_prices": {"h200": H200_PRICE}, "currency": "USD"})


def set_times(rt: Runtime, run_id: str, number: int, start: datetime, end: datetime | None) -> None:
    """Give attempt ``number`` known times (as if it ran then)."""
    with rt.transaction() as session:
        attempt = session.scalars(
            select(Attempt).where(Attempt.run_id == run_id, Attempt.number == number)
        ).one()
        attempt.started_at, attempt.ended_at = start, end


def paused_and_resumed(rt: Runtime, profile: str) -> str:
    """A run that ran, was paused, and runs again as attempt 2."""
    run_id = running_run(rt, user="alice", profiles=[profile])
    assert actions.pause(rt, member("alice"), run_id).accepted
    report(rt, run_id, "exited", exit_code=143)
    assert run_row(rt, run_id).status == JobStatus.PAUSED
    assert actions.resume(rt, member("alice"), run_id).accepted
    assert schedule(rt) == [run_id]
    report(rt, run_id, "starting", attempt=2)
    report(rt, run_id, "running", attempt=2)
    return run_id


def test_two_attempts_add_up_the_pause_between_them_costs_nothing_and_a_running_one_counts_to_now(
    rt: Runtime,
) -> None:
    run_id = paused_and_resumed(rt, "h200:2")
    first = datetime.now(UTC) - timedelta(hours=5)
    set_times(rt, run_id, 1, first, first + timedelta(hours=1))  # then paused for 3 hours
    second = first + timedelta(hours=4)
    set_times(rt, run_id, 2, second, None)  # running for about an hour

    before = utcnow()
    view = jobs.get(rt, member("alice"), run_id)
    after = utcnow()

    one, two = view.attempts
    assert (one.gpus, one.gpu_hours) == (2, pytest.approx(2.0))
    assert one.cost == pytest.approx(2.0 * H200_PRICE) and one.currency == "USD"
    assert two.gpus == 2 and two.ended_at is None
    low, high = (2 * (t - second).total_seconds() / 3600 for t in (before, after))
    assert low <= two.gpu_hours <= high
    assert view.gpu_hours == pytest.approx(one.gpu_hours + two.gpu_hours)
    assert view.gpu_hours < 2 * 5  # the three paused hours are not in it
    assert view.cost == pytest.approx(view.gpu_hours * H200_PRICE)
    assert view.currency == "USD"


def test_a_series_without_a_price_shows_hours_only(rt: Runtime) -> None:
    run_id = running_run(rt, user="alice", profiles=["h100:4"])
    start = utcnow() - timedelta(hours=2)
    set_times(rt, run_id, 1, start, start + timedelta(minutes=30))
    view = jobs.get(rt, member("alice"), run_id)
    assert view.gpu_hours == pytest.approx(2.0)
    assert (view.cost, view.currency) == (None, "")
    assert (view.attempts[0].cost, view.attempts[0].currency) == (None, "")


def test_a_queued_run_has_no_gpu_hours_yet() -> None:
    assert accounting.attempt_gpu_hours([], [], None, None, utcnow()) == {}


def test_a_cpu_allocation_counts_no_gpu_hours_and_a_virtual_gpu_counts_as_held() -> None:
    pools = [{"name": "main", "series": "h200"}]
    start = datetime(2026, 5, 1, 10, tzinfo=UTC)
    end = start + timedelta(hours=3)
    cpu = [{"rank": 0, "pool": "main", "node": "h200-1", "gpus": []}]
    assert accounting.attempt_gpu_hours(cpu, pools, start, end, end) == {}
    assert accounting.price({}, {"h200": H200_PRICE}) == 0.0
    # The GPU slot of a virtual inventory was kept from every other run, whatever the job ran on.
    held = [{"rank": 0, "pool": "main", "node": "h200-1", "gpus": [0]}]
    assert accounting.attempt_gpu_hours(held, pools, start, end, end) == {
        ("h200", date(2026, 5, 1)): 3.0
    }


def test_the_price_is_none_without_prices_or_with_hours_of_an_unpriced_series() -> None:
    prices = {"h200": 3.0, "h100": 2.0}
    assert accounting.price({"h200": 2.0, "h100": 1.5}, prices) == pytest.approx(9.0)
    assert accounting.price({"h200": 2.0, "a100": 1.0}, prices) is None
    assert accounting.price({"h200": 2.0, "a100": 0.0}, prices) == pytest.approx(6.0)
    assert accounting.price({"h200": 2.0}, {}) is None


def test_usage_by_run_lists_each_runs_hours_largest_first_with_its_cost(rt: Runtime) -> None:
    small = running_run(rt, user="alice", profiles=["h200:2"])
    large = running_run(rt, user="bob", profiles=["h100:8"])
    for run_id in (small, large):
        report(rt, run_id, "exited", exit_code=0)
    day = datetime(2026, 3, 1, 22, 0, tzinfo=UTC)
    set_times(rt, small, 1, day, day + timedelta(hours=3))  # 2 GPUs × 3 h, across midnight
    set_times(rt, large, 1, day, day + timedelta(hours=1))  # 8 GPUs × 1 h

    found = accounting.report(rt, by="run")
    assert [(r.run_id, r.user, r.experiment, r.gpu_hours, r.cost) for r in found.rows] == [
        (large, "bob", "exp", pytest.approx(8.0), None),
        (small, "alice", "exp", pytest.approx(6.0), pytest.approx(6.0 * H200_PRICE)),
    ]
    assert found.total_gpu_hours == pytest.approx(14.0)
    assert (found.total_cost, found.currency) == (None, "USD")  # h100 hours have no price
    # Each run's figure is the one its own view shows.
    assert jobs.get(rt, member("alice"), small).gpu_hours == pytest.approx(6.0)
    since = accounting.report(rt, by="run", since=date(2026, 3, 2))
    assert [(r.run_id, r.gpu_hours) for r in since.rows] == [(small, pytest.approx(2.0))]
