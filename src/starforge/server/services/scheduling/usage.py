"""Usage: what active runs hold, per user and per node, set against the users' quotas.

Usage is read from the current attempt's allocation (the same rows the scheduler subtracts from
the inventory, :func:`starforge.server.services.scheduling.queue.holdings`), so ``sf status`` and
the scheduler never disagree. Queued runs' places and reasons come from the scheduler's latest pass
(:mod:`starforge.server.services.scheduling.queue`); nothing here plans.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from starforge.contract.api import (
    ClusterStatus,
    MyUsage,
    NodeCapacity,
    QuotaList,
    RunBrief,
    SeriesCapacity,
    Usage,
    UserQuota,
)
from starforge.contract.states import ACTIVE, JobStatus
from starforge.server.db.models import Run, User
from starforge.server.executors.base import SupportsInventory
from starforge.server.runtime import Runtime
from starforge.server.services.access import users
from starforge.server.services.scheduling import queue, quotas, scheduler

_ACTIVE = [s.value for s in ACTIVE]
_WAITING = [JobStatus.QUEUED.value, JobStatus.PAUSED.value]  # hold nothing, not ended


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


def _user_quota(
    rt: Runtime, session: Session, user: str, held: list[scheduler.Holding]
) -> UserQuota:
    quota, is_default = quotas.effective(session, rt.settings, user)
    queued = session.scalar(
        select(func.count()).where(Run.user == user, Run.status == JobStatus.QUEUED.value)
    )
    return UserQuota(
        user=user,
        role=users.role_of(session, user),
        quota=quota,
        default=is_default,
        usage=usage(rt, held, user, int(queued or 0)),
    )


def get(rt: Runtime, user: str) -> UserQuota:
    """A user's quota and usage (for admins: the route checks the role)."""
    with rt.transaction() as session:
        users.require_known(session, user)
        return _user_quota(rt, session, user, queue.holdings(session))


def list_all(rt: Runtime) -> QuotaList:
    """Every user's quota and usage (for admins: the route checks the role)."""
    with rt.transaction() as session:
        held = queue.holdings(session)
        names = list(session.scalars(select(User.name).order_by(User.name)))
        return QuotaList(users=[_user_quota(rt, session, n, held) for n in names])


def cluster_status(rt: Runtime, viewer: users.Caller | None = None) -> ClusterStatus:
    """Capacity for everyone; run ids on nodes only the viewer's own (everyone's for operators
    and admins): another user's run counts in its node's GPUs but is not named."""
    unreachable = ""
    if isinstance(rt.executor, SupportsInventory) and rt.executor.inventory() is None:
        unreachable = (
            f"{rt.settings.executor.capitalize()} is unreachable: its controller does not answer, "
            "so its nodes cannot be read (shown: the last known) and nothing is placed until it "
            "answers; running jobs go on"
        )
    with rt.transaction() as session:
        held = queue.holdings(session)
        queued = session.scalar(select(func.count()).where(Run.status == JobStatus.QUEUED.value))
        active = session.scalar(select(func.count()).where(Run.status.in_(_ACTIVE)))
    see_all = viewer is None or users.sees_all(viewer)
    nodes = []
    for n in rt.inventory:
        mine = [h for h in held if h.node == n.name]
        used = len({g for h in mine for g in h.gpus})
        runs = sorted(
            {h.run_id for h in mine if see_all or (viewer is not None and h.user == viewer.name)}
        )
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
        unreachable=unreachable,
    )


def _brief(rt: Runtime, session: Session, run: Run, nodes: list[str]) -> RunBrief:
    position, reason = None, run.reason
    if run.status == JobStatus.QUEUED:
        found = queue.decision(rt, run.id)
        if found is None:  # submitted since the latest pass
            position = queue.priority_position(session, run)
        else:
            position, reason = found[1], found[0].reason
    return RunBrief(
        run_id=run.id,
        experiment=f"{run.project}/{run.experiment}",
        status=JobStatus(run.status),
        gpus=run.gpus,
        profiles=list(run.spec.get("profiles") or []),
        nodes=nodes,
        queue_position=position,
        reason=reason,
    )


def my_usage(rt: Runtime, user: str) -> MyUsage:
    """The caller's quota, usage, active runs (and where), queued runs (with positions) and
    paused runs (with why)."""
    with rt.transaction() as session:
        held = queue.holdings(session)
        found = _user_quota(rt, session, user, held)
        rows = session.scalars(
            select(Run)
            .where(Run.user == user, Run.status.in_([*_ACTIVE, *_WAITING]))
            .order_by(Run.created_at)
        ).all()
        where: dict[str, list[str]] = {}
        for h in held:
            where.setdefault(h.run_id, [])
            if h.node not in where[h.run_id]:
                where[h.run_id].append(h.node)
        briefs = [_brief(rt, session, run, where.get(run.id, [])) for run in rows]
    active = [b for b in briefs if b.status.is_active]
    queued = sorted(
        (b for b in briefs if b.status == JobStatus.QUEUED), key=lambda b: b.queue_position or 0
    )
    paused = [b for b in briefs if b.status == JobStatus.PAUSED]
    return MyUsage(**found.model_dump(), active=active, queued_runs=queued, paused=paused)
