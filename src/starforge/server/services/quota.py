"""Quotas, usage, and the queue as the scheduler sees it.

* Quotas: a user's limits are their own row in ``quotas`` when an admin set one, else the
  server's ``quota_defaults``. Only admins change them (:func:`set_quota`); a change wakes the
  scheduler, and a new priority applies to the user's queued runs at once.
* Usage: what active runs hold, read from the current attempt's allocation (the same rows the
  scheduler subtracts from the inventory), so ``sf status`` and the scheduler never disagree.
* The queue: :func:`snapshot` reads everything one pass needs in one transaction;
  :func:`decide` runs the pure pass (:func:`starforge.server.services.scheduler.plan`) on it.
  The dispatcher commits the starts; :func:`explain` gives queued runs' views their position and
  "why pending" live (what the scheduler would decide now), and :func:`save_reasons` stores each
  waiting run's one-line reason when it changed, so reading a run row also says why it waits.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from pydantic import ValidationError
from sqlalchemy import Select, bindparam, func, select
from sqlalchemy.orm import Session

from starforge.contract.api import (
    ClusterStatus,
    MyUsage,
    NodeCapacity,
    PendingView,
    Quota,
    QuotaList,
    QuotaUpdate,
    RunBrief,
    RunView,
    SeriesCapacity,
    Usage,
    UserQuota,
)
from starforge.contract.errors import Forbidden, UsageError, UserNotFound
from starforge.contract.profiles import Pool
from starforge.contract.states import ACTIVE, JobStatus
from starforge.server.db.models import Attempt, Run, User, utcnow
from starforge.server.db.resources import QuotaRow
from starforge.server.runtime import Runtime
from starforge.server.services import scheduler
from starforge.server.settings import Settings

ADMIN = "admin"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ACTIVE = [s.value for s in ACTIVE]


# ---- quotas -----------------------------------------------------------------------------------


def _loads(value: Any) -> Any:
    """A JSON column's value: parsed by SQLAlchemy, or still text when read by the raw cursor."""
    return json.loads(value) if isinstance(value, str | bytes) else value


def _quota(
    max_gpus: int | None,
    per_series: Any,
    max_runs: int | None,
    allowed: Any,
    priority: int,
) -> Quota:
    return Quota(
        max_gpus=max_gpus,
        max_gpus_per_series=_loads(per_series) or {},
        max_runs=max_runs,
        allowed_profiles=_loads(allowed),
        priority=priority,
    )


def _from_row(row: QuotaRow) -> Quota:
    return _quota(
        row.max_gpus,
        row.max_gpus_per_series,
        row.max_runs,
        row.allowed_profiles,
        row.priority,
    )


def defaults(settings: Settings) -> Quota:
    return Quota.model_validate(settings.quota_defaults.model_dump())


def effective(session: Session, settings: Settings, user: str) -> tuple[Quota, bool]:
    """The user's quota and whether it is the server's default."""
    row = session.get(QuotaRow, user)
    return (defaults(settings), True) if row is None else (_from_row(row), False)


def role_of(session: Session, user: str) -> str:
    return session.scalar(select(User.role).where(User.name == user)) or "user"


def require_admin(session: Session, user: str) -> None:
    if role_of(session, user) != ADMIN:
        raise Forbidden(
            f"only admins may change or list quotas; {user} is not an admin",
            hint="`sf status` shows your own quota and usage",
        )


def make_admin(session: Session, user: str) -> None:
    """Give ``user`` the admin role (the embedded server's local user is the admin)."""
    row = session.scalars(select(User).where(User.name == user)).one_or_none()
    if row is not None and row.role != ADMIN:
        row.role = ADMIN


def _known_user(session: Session, user: str) -> None:
    if session.scalar(select(User.id).where(User.name == user)) is None:
        names = list(session.scalars(select(User.name).order_by(User.name).limit(20)))
        raise UserNotFound(
            f"no user {user!r}",
            hint=f"known users: {', '.join(names) or '(none)'}",
            details={"user": user},
        )


def _validate(rt: Runtime, quota: Quota) -> None:
    profiles = {p.name for p in rt.settings.profiles}
    unknown = sorted(set(quota.allowed_profiles or []) - profiles)
    if unknown:
        raise UsageError(
            f"unknown profile(s) in the allowed list: {', '.join(unknown)}",
            hint=f"valid profiles: {', '.join(sorted(profiles))}",
        )
    series = {n.series for n in rt.inventory} | {p.series for p in rt.settings.profiles}
    bad = sorted(set(quota.max_gpus_per_series) - series)
    if bad:
        raise UsageError(
            f"unknown GPU series in the per-series limits: {', '.join(bad)}",
            hint=f"GPU series here: {', '.join(sorted(series))}",
        )


def _apply(base: Quota, body: QuotaUpdate) -> Quota:
    data: dict[str, Any] = base.model_dump()
    given = body.model_fields_set
    for name in ("max_gpus", "max_runs"):
        if name in given:
            data[name] = getattr(body, name)
    if "allowed_profiles" in given:
        allowed = body.allowed_profiles
        data["allowed_profiles"] = sorted(set(allowed)) if allowed is not None else None
    if "priority" in given:
        if body.priority is None:
            raise UsageError("priority cannot be null", hint="give a whole number, e.g. 0")
        data["priority"] = body.priority
    per_series = dict(data["max_gpus_per_series"])
    for series, limit in body.max_gpus_per_series.items():
        if limit is None:
            per_series.pop(series, None)
        elif limit < 0:
            raise UsageError(f"the {series} GPU limit must be 0 or more (got {limit})")
        else:
            per_series[series] = limit
    data["max_gpus_per_series"] = per_series
    try:
        return Quota.model_validate(data)
    except ValidationError as exc:
        raise UsageError(f"invalid quota: {exc.errors()[0]['msg']}") from None


def set_quota(rt: Runtime, admin: str, user: str, body: QuotaUpdate) -> UserQuota:
    """Set ``user``'s quota (admins only); the user's queued runs take the new priority."""
    with rt.transaction() as session:
        require_admin(session, admin)
        _known_user(session, user)
        current, _ = effective(session, rt.settings, user)
        base = defaults(rt.settings) if body.reset else current
        new = _apply(base, body)
        _validate(rt, new)
        row = session.get(QuotaRow, user)
        if body.reset and body.model_fields_set == {"reset"}:  # back to the defaults
            if row is not None:
                session.delete(row)
        else:
            if row is None:
                row = QuotaRow(user=user)
                session.add(row)
            row.max_gpus = new.max_gpus
            row.max_gpus_per_series = dict(new.max_gpus_per_series)
            row.max_runs = new.max_runs
            row.allowed_profiles = (
                list(new.allowed_profiles) if new.allowed_profiles is not None else None
            )
            row.priority = new.priority
            row.updated_at = utcnow()
            row.updated_by = admin
        session.execute(
            sa.update(Run)
            .where(Run.user == user, Run.status == JobStatus.QUEUED.value)
            .values(priority=new.priority)
        )
    rt.wake_scheduler()
    return get(rt, admin, user)


def _user_quota(
    rt: Runtime, session: Session, user: str, holdings: list[scheduler.Holding]
) -> UserQuota:
    quota, is_default = effective(session, rt.settings, user)
    queued = session.scalar(
        select(func.count()).where(Run.user == user, Run.status == JobStatus.QUEUED.value)
    )
    return UserQuota(
        user=user,
        role=role_of(session, user),
        quota=quota,
        default=is_default,
        usage=usage(rt, holdings, user, int(queued or 0)),
    )


def get(rt: Runtime, admin: str, user: str) -> UserQuota:
    with rt.transaction() as session:
        require_admin(session, admin)
        _known_user(session, user)
        return _user_quota(rt, session, user, holdings(session))


def list_all(rt: Runtime, admin: str) -> QuotaList:
    with rt.transaction() as session:
        require_admin(session, admin)
        held = holdings(session)
        names = list(session.scalars(select(User.name).order_by(User.name)))
        return QuotaList(users=[_user_quota(rt, session, n, held) for n in names])


# ---- usage ------------------------------------------------------------------------------------


_HOLDINGS = (
    select(Run.id, Run.user, Attempt.allocation)
    .join(Attempt, Attempt.run_id == Run.id)
    .where(
        Run.status.in_(_ACTIVE),
        Attempt.number == Run.current_attempt,
        Attempt.ended_at.is_(None),
    )
)
_QUEUE = select(Run.id, Run.user, Run.priority, Run.created_at, Run.pools, Run.reason).where(
    Run.status == JobStatus.QUEUED.value
)
_QUOTAS = select(
    QuotaRow.user,
    QuotaRow.max_gpus,
    QuotaRow.max_gpus_per_series,
    QuotaRow.max_runs,
    QuotaRow.allowed_profiles,
    QuotaRow.priority,
)
_SQL: dict[tuple[str, int], str] = {}


def _to_holdings(rows: Iterable[Sequence[Any]]) -> list[scheduler.Holding]:
    return [
        scheduler.Holding(run_id, user, str(slot["node"]), tuple(slot["gpus"]))
        for run_id, user, allocation in rows
        for slot in _loads(allocation) or []
    ]


def holdings(session: Session) -> list[scheduler.Holding]:
    """GPUs held by the current, unfinished attempts of active runs (as dispatch counts them)."""
    return _to_holdings(session.execute(_HOLDINGS).all())


@contextmanager
def _reader(rt: Runtime) -> Iterator[Callable[[Select[Any]], list[Sequence[Any]]]]:
    """Run SELECTs as one consistent read. On SQLite every session transaction takes the write
    lock (BEGIN IMMEDIATE), so a snapshot of a long queue read that way would hold back every
    submit and runner event while it is read: here a deferred transaction on a raw connection
    reads without the lock (WAL readers never block the writer). Elsewhere: a plain session."""
    if rt.engine.dialect.name != "sqlite":
        with rt.transaction() as session:
            yield lambda stmt: list(session.execute(stmt).all())
        return
    raw = rt.engine.raw_connection()
    try:
        cursor = raw.cursor()
        cursor.execute("BEGIN")
        try:
            yield lambda stmt: list(cursor.execute(_sql(rt, stmt)).fetchall())
        finally:
            cursor.execute("ROLLBACK")
    finally:
        raw.close()


def _sql(rt: Runtime, stmt: Select[Any]) -> str:
    key = (rt.engine.dialect.name, id(stmt))  # only the module's constant statements come here
    if key not in _SQL:
        compiled = stmt.compile(dialect=rt.engine.dialect, compile_kwargs={"literal_binds": True})
        _SQL[key] = str(compiled)
    return _SQL[key]


def _when(value: datetime | str) -> datetime:
    """A stored timestamp (naive UTC; text when read raw from SQLite) as aware UTC."""
    when = datetime.fromisoformat(value) if isinstance(value, str) else value
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def usage(rt: Runtime, held: Iterable[scheduler.Holding], user: str, queued: int = 0) -> Usage:
    series = {n.name: n.series for n in rt.inventory}
    by_series: dict[str, int] = {}
    runs: set[str] = set()
    for h in held:
        if h.user != user:
            continue
        runs.add(h.run_id)
        key = series.get(h.node, "?")
        by_series[key] = by_series.get(key, 0) + len(h.gpus)
    return Usage(
        gpus=sum(by_series.values()), gpus_by_series=by_series, runs=len(runs), queued=queued
    )


def cluster_status(rt: Runtime, viewer: str | None = None) -> ClusterStatus:
    """Capacity for everyone; run ids on nodes only the viewer's own (all of them for admins)."""
    with rt.transaction() as session:
        held = holdings(session)
        see_all = viewer is None or role_of(session, viewer) == ADMIN
        queued = session.scalar(select(func.count()).where(Run.status == JobStatus.QUEUED.value))
        active = session.scalar(select(func.count()).where(Run.status.in_(_ACTIVE)))
    nodes = []
    for n in rt.inventory:
        mine = [h for h in held if h.node == n.name]
        used = len({g for h in mine for g in h.gpus})
        runs = sorted({h.run_id for h in mine if see_all or h.user == viewer})
        nodes.append(
            NodeCapacity(
                name=n.name, series=n.series, gpus=n.gpus, used=used, free=n.gpus - used, runs=runs
            )
        )
    series = []
    for s in sorted({n.series for n in rt.inventory}):
        of = [n for n in nodes if n.series == s]
        total, used = sum(n.gpus for n in of), sum(n.used for n in of)
        series.append(
            SeriesCapacity(series=s, nodes=len(of), total=total, used=used, free=total - used)
        )
    return ClusterStatus(
        executor=rt.settings.executor,
        profiles=rt.settings.profiles,
        series=series,
        nodes=nodes,
        queued=int(queued or 0),
        active=int(active or 0),
    )


def my_usage(rt: Runtime, user: str) -> MyUsage:
    """The caller's quota, usage, active runs (and where) and queued runs (with positions)."""
    snap = read_snapshot(rt)  # before the transaction: it reads without the write lock
    with rt.transaction() as session:
        found = _user_quota(rt, session, user, snap.holdings)
        rows = session.scalars(
            select(Run)
            .where(Run.user == user, Run.status.in_([*_ACTIVE, JobStatus.QUEUED.value]))
            .order_by(Run.created_at)
        ).all()
    decided = {d.run_id: d for d in decide(rt, snap)}
    where: dict[str, list[str]] = {}
    for h in snap.holdings:
        where.setdefault(h.run_id, [])
        if h.node not in where[h.run_id]:
            where[h.run_id].append(h.node)
    active, queued = [], []
    for run in rows:
        d = decided.get(run.id)
        brief = RunBrief(
            run_id=run.id,
            experiment=f"{run.project}/{run.experiment}",
            status=JobStatus(run.status),
            gpus=run.gpus,
            profiles=list(run.spec.get("profiles") or []),
            nodes=where.get(run.id, []),
            queue_position=d.position if d else None,
            reason=d.reason if d else run.reason,
        )
        (queued if run.status == JobStatus.QUEUED else active).append(brief)
    queued.sort(key=lambda b: b.queue_position or 0)
    return MyUsage(**found.model_dump(), active=active, queued_runs=queued)


# ---- the queue --------------------------------------------------------------------------------


@dataclass
class Snapshot:
    queue: list[scheduler.QueuedRun] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)  # stored reason per queued run
    holdings: list[scheduler.Holding] = field(default_factory=list)
    limits: dict[str, scheduler.Limits] = field(default_factory=dict)
    default: scheduler.Limits = scheduler.UNLIMITED


def read_snapshot(rt: Runtime) -> Snapshot:
    """Everything one pass reads, as one consistent read that takes no write lock."""
    with _reader(rt) as read:
        queue, held, quotas = read(_QUEUE), read(_HOLDINGS), read(_QUOTAS)
    snap = Snapshot(
        holdings=_to_holdings(held),
        limits={},
        default=scheduler.Limits.of(defaults(rt.settings)),
    )
    for user, *limits in quotas:
        snap.limits[user] = scheduler.Limits.of(_quota(*limits))
    shapes: dict[str, scheduler.QueuedRun] = {}  # most runs share a few shapes: derive each once
    for run_id, user, priority, created_at, pools_value, reason in queue:
        key = pools_value if isinstance(pools_value, str) else json.dumps(pools_value)
        shape = shapes.get(key)
        if shape is None:
            pools = tuple(Pool.model_validate(p) for p in _loads(pools_value) or [])
            shape = shapes[key] = scheduler.QueuedRun("", "", 0, _EPOCH, pools)
        snap.queue.append(shape.like(run_id, user, priority, _when(created_at)))
        snap.reasons[run_id] = reason
    return snap


def any_gpu_free(rt: Runtime) -> bool:
    """Whether any GPU of the inventory is free: when none is, no pass can start anything, and
    the scheduler skips reading the queue (the views still explain it live)."""
    with _reader(rt) as read:
        held = _to_holdings(read(_HOLDINGS))
    free = scheduler.free_gpus(rt.inventory, ((h.node, h.gpus) for h in held))
    return any(node.free for node in free.values())


def decide(rt: Runtime, snap: Snapshot, explain: Sequence[str] = ()) -> list[scheduler.Decision]:
    patience = timedelta(seconds=rt.settings.fair_share_patience_s)
    return scheduler.plan(
        snap.queue,
        rt.inventory,
        snap.holdings,
        snap.limits,
        default=snap.default,
        explain=explain,
        overdue_before=utcnow() - patience,
    )


def save_reasons(rt: Runtime, snap: Snapshot, decisions: Iterable[scheduler.Decision]) -> int:
    """Store the reason of every still-queued waiting run whose reason changed; returns how many."""
    changed = [
        {"rid": d.run_id, "why": d.reason}
        for d in decisions
        if not d.starts and snap.reasons.get(d.run_id) != d.reason
    ]
    if not changed:
        return 0
    table = Run.__table__
    stmt = (
        sa.update(table)
        .where(table.c.id == bindparam("rid"), table.c.status == JobStatus.QUEUED.value)
        .values(reason=bindparam("why"), updated_at=utcnow())
    )
    with rt.transaction() as session:
        session.execute(stmt, changed)
    return len(changed)


def pending_view(d: scheduler.Decision, queued: int) -> PendingView:
    message = d.reason
    if d.starts:
        message = f"{d.reason}: the scheduler is starting it"
    return PendingView(
        position=d.position,
        queued=queued,
        blocker=d.blocker.value,
        message=message,
        detail=d.detail,
        blocking_runs=list(d.blocking_runs),
        next_event=d.next_event,
        reserved_nodes=list(d.reserved_nodes),
    )


def explain(rt: Runtime, views: Sequence[RunView]) -> None:
    """Give each queued view its position and why it waits, as the scheduler would decide now."""
    wanted = [v.run_id for v in views if v.status == JobStatus.QUEUED]
    if not wanted:
        return
    snap = read_snapshot(rt)
    decided = {d.run_id: d for d in decide(rt, snap, explain=wanted)}
    for v in views:
        d = decided.get(v.run_id)
        if v.status != JobStatus.QUEUED or d is None:
            continue
        v.queue_position = d.position
        v.pending = pending_view(d, len(snap.queue))
        v.reason = v.pending.message


def position(rt: Runtime, run_id: str) -> int | None:
    """1-based place of a queued run in the order the scheduler considers the queue."""
    snap = read_snapshot(rt)
    return next((d.position for d in decide(rt, snap) if d.run_id == run_id), None)


def priority_position(session: Session, run: Run) -> int:
    """1-based place of a queued run by priority then age (what a single user sees), in one
    COUNT: the cheap answer at submit, whatever the length of the queue."""
    same_priority_older = sa.and_(
        Run.priority == run.priority,
        sa.or_(
            Run.created_at < run.created_at,
            sa.and_(Run.created_at == run.created_at, Run.id < run.id),
        ),
    )
    ahead = session.scalar(
        select(func.count())
        .select_from(Run)
        .where(
            Run.status == JobStatus.QUEUED.value,
            sa.or_(Run.priority > run.priority, same_priority_older),
        )
    )
    return int(ahead or 0) + 1
