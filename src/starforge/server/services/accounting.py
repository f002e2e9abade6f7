"""GPU-hour accounting and the daily GPU-hour quota.

Nothing is counted separately: an attempt's GPU-hours are its GPUs (the slots of its allocation)
× (``ended_at`` − ``started_at``) of its own row, a running attempt counting up to now. Figures
per user, project and UTC day split each attempt at midnight, so a day's figure is exactly the
part of each attempt that fell in it. The daily quota of a user is their row in
``daily_gpu_quotas`` (an admin's), else the server's ``daily_gpu_hours``; a user who used it up
today gets no new start (their queued runs wait with that reason, :func:`over_daily_quota`), and
running runs go on.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from sqlalchemy import Connection, or_, select
from sqlalchemy.orm import Session

from starforge.contract.errors import UsageError
from starforge.contract.labops import MyGpuHours, UsageReport, UsageRow
from starforge.server.db.labops import DailyGpuQuota
from starforge.server.db.models import Attempt, Run, utcnow
from starforge.server.runtime import Runtime
from starforge.server.services import users
from starforge.server.settings import Settings

BY = ("day", "user", "project")
_ATTEMPTS = select(
    Run.user, Run.project, Attempt.allocation, Attempt.started_at, Attempt.ended_at
).join(Run, Run.id == Attempt.run_id)


def gpus_of(allocation: Sequence[dict[str, Any]] | None) -> int:
    """GPUs an attempt held: every slot's GPUs, on every node."""
    return sum(len(slot.get("gpus") or []) for slot in allocation or [])


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


def tally(
    rows: Iterable[Sequence[Any]], now: datetime, since: date | None = None
) -> dict[tuple[str, str, date], float]:
    """GPU-hours per (user, project, day) of attempt rows (:data:`_ATTEMPTS`'s columns)."""
    found: dict[tuple[str, str, date], float] = defaultdict(float)
    floor = _midnight(since) if since is not None else None
    for user, project, allocation, started, ended in rows:
        gpus = gpus_of(allocation)
        if started is None or gpus == 0:
            continue
        start = max(started, floor) if floor is not None else started
        for day, hours in split_by_day(start, ended or now):
            found[(user, project, day)] += gpus * hours
    return dict(found)


def _rows(conn: Connection | Session, since: date | None, user: str | None = None) -> list[Any]:
    query = _ATTEMPTS.where(Attempt.started_at.is_not(None))
    if since is not None:
        query = query.where(or_(Attempt.ended_at.is_(None), Attempt.ended_at > _midnight(since)))
    if user is not None:
        query = query.where(Run.user == user)
    return list(conn.execute(query).all())


def report(rt: Runtime, admin: str, by: str = "day", since: date | None = None) -> UsageReport:
    """Everyone's GPU-hours (admins only), per (user, project, day) or summed per user or
    project, largest first for those."""
    if by not in BY:
        raise UsageError(f"--by {by!r}: give one of {', '.join(BY)}")
    now = utcnow()
    with rt.transaction() as session:
        users.require_admin(session, admin)
        figures = tally(_rows(session, since), now, since)
    rows: list[UsageRow]
    if by == "day":
        rows = [
            UsageRow(user=u, project=p, day=d, gpu_hours=h)
            for (u, p, d), h in sorted(figures.items(), key=lambda kv: (kv[0][2], kv[0][:2]))
        ]
    else:
        summed: dict[str, float] = defaultdict(float)
        for (u, p, _), h in figures.items():
            summed[u if by == "user" else p] += h
        rows = [
            UsageRow(**{by: key}, gpu_hours=h)
            for key, h in sorted(summed.items(), key=lambda kv: (-kv[1], kv[0]))
        ]
    return UsageReport(by=by, since=since, rows=rows, total_gpu_hours=sum(figures.values()))


def daily_quota(session: Session, settings: Settings, user: str) -> float | None:
    row = session.get(DailyGpuQuota, user)
    return row.gpu_hours if row is not None else settings.daily_gpu_hours


def used_today(session: Session | Connection, user: str, now: datetime) -> float:
    today = now.astimezone(UTC).date()
    figures = tally(_rows(session, today, user), now, today)
    return sum(h for (_, _, d), h in figures.items() if d == today)


def mine(rt: Runtime, user: str) -> MyGpuHours:
    """The caller's GPU-hours today (UTC) and in total, beside their daily quota."""
    now = utcnow()
    with rt.transaction() as session:
        figures = tally(_rows(session, None, user), now)
        quota = daily_quota(session, rt.settings, user)
    today = now.date()
    return MyGpuHours(
        user=user,
        today=sum(h for (_, _, d), h in figures.items() if d == today),
        total=sum(figures.values()),
        daily_quota=quota,
    )


def set_daily_quota(rt: Runtime, admin: str, user: str, gpu_hours: float | None) -> MyGpuHours:
    """Set ``user``'s daily GPU-hours (None: no limit); wakes the scheduler."""
    with rt.transaction() as session:
        users.require_admin(session, admin)
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
