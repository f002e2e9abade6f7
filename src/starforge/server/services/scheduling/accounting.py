"""GPU-hour accounting, what it costs, and the daily GPU-hour quota.

Nothing is counted separately: an attempt's GPU-hours are its GPUs (the slots of its allocation)
× (``ended_at`` − ``started_at``) of its own row, a running attempt counting up to now. A paused
run holds no attempt, so it accrues nothing while paused; a resumed or retried run's attempts add
up. A run on a profile with no GPUs (a CPU step) counts 0: what is counted is what the allocation
held, so a run on a virtual ``h200`` inventory whose job runs on the CPU counts the GPUs it kept
from everyone else. :func:`attempt_gpu_hours` is the one computation: a run's view
(:func:`run_costs`), ``sf admin usage`` (:func:`report`), ``sf status`` and the daily quota all
read it. Figures per user, project and UTC day split each attempt at midnight, so a day's figure
is exactly the part of each attempt that fell in it.

A year of attempts is not read for every report: when an attempt ends, its figures per (day,
user, project, series) are added to ``usage_summaries`` in the transaction that ends it
(:func:`attempt_ended`, called by the lifecycle's ``finish_attempt``, the one place an attempt
ends). Reports per day, user or project, ``sf status``'s own figures and the daily quota read
those rows and add the attempts still open (an index on ``attempts.ended_at`` finds them), counted
up to now; only ``--by run`` reads attempts, those that ended since ``--since`` through that index.

Money is hours × the server's ``gpu_hour_prices`` for the series of each slot's pool; a figure
that counts hours of a series without a price has no cost (None: hours only), and with no prices
configured nothing has one.

The daily quota of a user is their row in ``daily_gpu_quotas`` (an admin's), else the server's
``daily_gpu_hours``; a user who used it up today gets no new start (their queued runs wait with
that reason, :func:`over_daily_quota`), and running runs go on.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from sqlalchemy import Connection, func, or_, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from starforge.contract.errors import UsageError
from starforge.contract.labops import MyGpuHours, UsageReport, UsageRow
from starforge.server.db.labops import DailyGpuQuota, UsageSummary
from starforge.server.db.models import Attempt, Run, utcnow
from starforge.server.runtime import Runtime
from starforge.server.services.access import users
from starforge.server.settings import Settings

BY = ("day", "user", "project", "run")
_ATTEMPTS = select(
    Run.id,
    Run.user,
    Run.project,
    Run.experiment,
    Run.pools,
    Attempt.allocation,
    Attempt.started_at,
    Attempt.ended_at,
).join(Run, Run.id == Attempt.run_id)
UNKNOWN_SERIES = "?"  # a slot whose pool the run does not name (never priced)

Allocation = Sequence[Mapping[str, Any]] | None
Pools = Sequence[Mapping[str, Any]] | None


def gpus_of(allocation: Allocation) -> int:
    """GPUs an attempt held: every slot's GPUs, on every node."""
    return sum(len(slot.get("gpus") or []) for slot in allocation or [])


def gpus_by_series(allocation: Allocation, pools: Pools) -> dict[str, int]:
    """GPUs an attempt held per GPU series: each slot's under the series of its pool."""
    series = {p.get("name"): p.get("series") for p in pools or []}
    held: dict[str, int] = defaultdict(int)
    for slot in allocation or []:
        if gpus := len(slot.get("gpus") or []):
            held[series.get(slot.get("pool")) or UNKNOWN_SERIES] += gpus
    return dict(held)


def split_by_day(start: datetime, end: datetime) -> list[tuple[date, float]]:
    """Hours of ``[start, end)`` in each UTC day it touches."""
    parts: list[tuple[date, float]] = []
    at = start.astimezone(UTC)
    end = end.astimezone(UTC)
    while at < end:
        midnight = datetime.combine(at.date() + timedelta(days=1), time(), tzinfo=UTC)
        upto = min(end, midnight)
        parts.append((at.date(), (upto - at).total_seconds() / 3600))
        at = upto
    return parts


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)


def attempt_gpu_hours(
    allocation: Allocation,
    pools: Pools,
    started: datetime | None,
    ended: datetime | None,
    now: datetime,
    since: date | None = None,
) -> dict[tuple[str, date], float]:
    """GPU-hours of one attempt per (series, UTC day): its GPUs × the part of
    ``[started, ended or now)`` in each day (from ``since`` on). An attempt not started yet
    (placed, never run) or holding no GPU counts nothing."""
    held = gpus_by_series(allocation, pools)
    if started is None or not held:
        return {}
    start = max(started, _midnight(since)) if since is not None else started
    found: dict[tuple[str, date], float] = defaultdict(float)
    for day, hours in split_by_day(start, ended or now):
        for series, gpus in held.items():
            found[(series, day)] += gpus * hours
    return dict(found)


def price(hours_by_series: Mapping[str, float], prices: Mapping[str, float]) -> float | None:
    """Money for GPU-hours per series; None with no prices, or hours of an unpriced series."""
    if not prices or any(h > 0 and s not in prices for s, h in hours_by_series.items()):
        return None
    return sum(h * prices[s] for s, h in hours_by_series.items() if h > 0)


def currency_of(settings: Settings, cost: float | None) -> str:
    return settings.currency if cost is not None else ""


@dataclass(frozen=True)
class Cost:
    """What one attempt (or a run, their sum) held and cost."""

    gpus: int
    gpu_hours: float
    cost: float | None


def run_costs(settings: Settings, run: Run, now: datetime) -> tuple[list[Cost], Cost]:
    """Each attempt's cost (in the order of ``run.attempts``) and the run's: their sum, priced
    only when every attempt is."""
    prices = settings.gpu_hour_prices
    costs: list[Cost] = []
    total: dict[str, float] = defaultdict(float)
    for a in run.attempts:
        mine: dict[str, float] = defaultdict(float)
        for (series, _), hours in attempt_gpu_hours(
            a.allocation, run.pools, a.started_at, a.ended_at, now
        ).items():
            mine[series] += hours
            total[series] += hours
        costs.append(Cost(gpus_of(a.allocation), sum(mine.values()), price(mine, prices)))
    priced = None if any(c.cost is None for c in costs) else price(total, prices)
    return costs, Cost(run.gpus, sum(total.values()), priced)


@dataclass(frozen=True)
class Share:
    """GPU-hours of one attempt of one series on one UTC day."""

    run_id: str
    user: str
    project: str
    experiment: str
    series: str
    day: date
    gpu_hours: float


def shares(rows: Iterable[Sequence[Any]], now: datetime, since: date | None = None) -> list[Share]:
    """Every attempt row's (:data:`_ATTEMPTS`'s columns) GPU-hours per series and day."""
    found: list[Share] = []
    for run_id, user, project, experiment, pools, allocation, started, ended in rows:
        for (series, day), hours in attempt_gpu_hours(
            allocation, pools, started, ended, now, since
        ).items():
            found.append(Share(run_id, user, project, experiment, series, day, hours))
    return found


def _rows(
    conn: Connection | Session,
    since: date | None,
    user: str | None = None,
    *,
    open_only: bool = False,
) -> list[Any]:
    """Attempt rows (:data:`_ATTEMPTS`'s columns) that ran: those still open with
    ``open_only``, else also those that ended after ``since``'s midnight (all with no ``since``)."""
    query = _ATTEMPTS.where(Attempt.started_at.is_not(None))
    if open_only:
        query = query.where(Attempt.ended_at.is_(None))
    elif since is not None:
        query = query.where(or_(Attempt.ended_at.is_(None), Attempt.ended_at > _midnight(since)))
    if user is not None:
        query = query.where(Run.user == user)
    return list(conn.execute(query).all())


_SUMMARY = UsageSummary.__table__
_SUMMARY_KEY = ("day", "user", "project", "series")


def attempt_ended(
    conn: Connection,
    user: str,
    project: str,
    pools: Pools,
    allocation: Allocation,
    started: datetime | None,
    ended: datetime,
) -> None:
    """Add an attempt that ended at ``ended`` to the usage summaries, in the caller's transaction
    (the one that ends it): its GPU-hours per (day, series) under ``user`` and ``project``."""
    figures = attempt_gpu_hours(allocation, pools, started, ended, ended)
    if not figures:
        return
    rows = [
        {"day": day, "user": user, "project": project, "series": series, "gpu_hours": hours}
        for (series, day), hours in figures.items()
    ]
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    insert = dialect.insert(_SUMMARY)
    # Two attempts ending at once on PostgreSQL both add: the row is locked by the first.
    conn.execute(
        insert.on_conflict_do_update(
            index_elements=list(_SUMMARY_KEY),
            set_={"gpu_hours": _SUMMARY.c.gpu_hours + insert.excluded.gpu_hours},
        ),
        rows,
    )


_KEYS = {"day": ("day", "user", "project"), "user": ("user",), "project": ("project",)}


def _group(share: Share, by: str) -> tuple[Any, ...]:
    if by == "day":
        return (share.day, share.user, share.project)
    if by == "run":
        return (share.run_id, share.user, share.project, share.experiment)
    return (share.user if by == "user" else share.project,)


def _summarized(
    conn: Connection | Session, by: str, since: date | None, user: str | None
) -> list[Any]:
    """The summaries' GPU-hours from ``since`` on (of ``user``), summed by the database per
    series and :func:`_group`'s key of ``by`` (not ``run``): rows of (*key, series, hours)."""
    keys = [_SUMMARY.c[name] for name in _KEYS[by]]
    query = select(*keys, _SUMMARY.c.series, func.sum(_SUMMARY.c.gpu_hours)).group_by(
        *keys, _SUMMARY.c.series
    )
    if since is not None:
        query = query.where(_SUMMARY.c.day >= since)
    if user is not None:
        query = query.where(_SUMMARY.c.user == user)
    return list(conn.execute(query).all())


def _figures(
    conn: Connection | Session, by: str, now: datetime, since: date | None, user: str | None = None
) -> dict[tuple[tuple[Any, ...], str], float]:
    """GPU-hours from ``since`` on (of ``user``) per (:func:`_group`'s key of ``by``, series):
    per run from the attempts; else the summaries of the ended attempts plus the attempts still
    open, counted up to ``now``."""
    found: dict[tuple[tuple[Any, ...], str], float] = defaultdict(float)
    if by != "run":
        for *key, series, hours in _summarized(conn, by, since, user):
            found[(tuple(key), series)] += hours
    for s in shares(_rows(conn, since, user, open_only=by != "run"), now, since):
        found[(_group(s, by), s.series)] += s.gpu_hours
    return found


def _row(by: str, key: tuple[Any, ...], hours: float, cost: float | None) -> UsageRow:
    if by == "day":
        return UsageRow(day=key[0], user=key[1], project=key[2], gpu_hours=hours, cost=cost)
    if by == "run":
        run_id, user, project, experiment = key
        return UsageRow(
            run_id=run_id,
            user=user,
            project=project,
            experiment=experiment,
            gpu_hours=hours,
            cost=cost,
        )
    return UsageRow(**{by: key[0]}, gpu_hours=hours, cost=cost)


def report(rt: Runtime, by: str = "day", since: date | None = None) -> UsageReport:
    """Everyone's GPU-hours (for admins: the route checks the role), per (user, project, day),
    or summed per user, project or run (largest first for those), each priced where the server
    prices its series."""
    if by not in BY:
        raise UsageError(f"--by {by!r}: give one of {', '.join(BY)}")
    now = utcnow()
    with rt.transaction() as session:
        found = _figures(session, by, now, since)
    prices = rt.settings.gpu_hour_prices
    grouped: dict[tuple[Any, ...], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    overall: dict[str, float] = defaultdict(float)
    for (key, series), gpu_hours in found.items():
        grouped[key][series] += gpu_hours
        overall[series] += gpu_hours
    hours = {key: sum(by_series.values()) for key, by_series in grouped.items()}

    def order_of(key: tuple[Any, ...]) -> tuple[Any, ...]:
        return key if by == "day" else (-hours[key], *key)

    order = sorted(hours, key=order_of)
    rows = [_row(by, k, hours[k], price(grouped[k], prices)) for k in order]
    total_cost = price(overall, prices)
    return UsageReport(
        by=by,
        since=since,
        rows=rows,
        total_gpu_hours=sum(overall.values()),
        total_cost=total_cost,
        currency=rt.settings.currency if prices else "",
    )


def daily_quota(session: Session, settings: Settings, user: str) -> float | None:
    row = session.get(DailyGpuQuota, user)
    return row.gpu_hours if row is not None else settings.daily_gpu_hours


def used_today(session: Session | Connection, user: str, now: datetime) -> float:
    today = now.astimezone(UTC).date()
    found = _figures(session, "day", now, today, user)
    return sum(h for ((day, _, _), _), h in found.items() if day == today)


def mine(rt: Runtime, user: str) -> MyGpuHours:
    """The caller's GPU-hours today (UTC) and in total, beside their daily quota."""
    now = utcnow()
    with rt.transaction() as session:
        found = _figures(session, "day", now, None, user)
        quota = daily_quota(session, rt.settings, user)
    today = now.date()
    return MyGpuHours(
        user=user,
        today=sum(h for ((day, _, _), _), h in found.items() if day == today),
        total=sum(found.values()),
        daily_quota=quota,
    )


def set_daily_quota(rt: Runtime, admin: str, user: str, gpu_hours: float | None) -> MyGpuHours:
    """Set ``user``'s daily GPU-hours (None: no limit) as ``admin`` (the route checks the role);
    wakes the scheduler."""
    with rt.transaction() as session:
        users.require_known(session, user)
        row = session.get(DailyGpuQuota, user)
        if row is None:
            row = DailyGpuQuota(user=user)
            session.add(row)
        row.gpu_hours, row.set_by, row.updated_at = gpu_hours, admin, utcnow()
    rt.wake_scheduler()
    return mine(rt, user)


def over_daily_quota(
    conn: Connection, settings: Settings, queued_users: set[str]
) -> dict[str, str]:
    """Why each of ``queued_users`` who used up today's GPU-hours waits (the others: absent)."""
    if not queued_users:
        return {}
    quotas = dict(
        conn.execute(
            select(DailyGpuQuota.user, DailyGpuQuota.gpu_hours).where(
                DailyGpuQuota.user.in_(queued_users)
            )
        ).all()
    )
    now = utcnow()
    waiting: dict[str, str] = {}
    for user in sorted(queued_users):
        cap = quotas.get(user, settings.daily_gpu_hours)
        if cap is None:
            continue
        used = used_today(conn, user, now)
        if used >= cap:
            waiting[user] = (
                f"your daily GPU-hour quota is used up: {used:.2f} of {cap:g} GPU-hours today "
                "(UTC); new runs start after midnight UTC or when an admin raises it"
            )
    return waiting
