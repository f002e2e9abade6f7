"""Run observability: metric points, hyperparameters and run metadata, written by the job itself.

Ingest is authenticated by the job's token (``STARFORGE_TOKEN``; only its sha256 is on the run,
renewed per attempt), so a job can write to its own run and nothing else; the runner's lifecycle
token is refused here, as the job's token is refused by lifecycle. Points are
stored by (run, key, step), last write wins, in one transaction per batch; within a batch the
later of two values for the same (key, step) is the one kept. Non-finite values and empty or
overlong keys are dropped and counted, never stored. Hyperparameters and metadata are merged
key by key into the run's ``run_meta`` row, which also keeps the highest step logged (the
writing itself: :mod:`starforge.server.services.observability.metricstore`, which also stores what a
job left in its spool when its run ends). A batch that takes a sweep variant past one of its sweep's
rungs is judged (``sweeps.judge_at_rung``) before it is answered: its job waits for that answer at
the rung (``STARFORGE_SYNC_STEPS``), so the variant is stopped or held where ASHA compares it.

Queries read a run the user owns (by id or prefix), one series per key in step order; a series
longer than ``max_points`` is downsampled by keeping, per bucket of consecutive steps, its lowest
and highest value (plus the first and last point), so spikes survive and the shape stays true.
"""

from __future__ import annotations

import hmac
from typing import NoReturn

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from starforge.contract.api import (
    IngestAck,
    IngestRequest,
    MetricSeries,
    MetricsView,
    ProgressList,
    RunMetaView,
    RunProgress,
)
from starforge.contract.errors import Forbidden, RunNotFound, Unauthorized, UsageError
from starforge.contract.states import JobStatus
from starforge.server.db.metrics import MetricPoint, RunMeta
from starforge.server.db.models import Run
from starforge.server.runtime import Runtime
from starforge.server.services.access import users
from starforge.server.services.access.users import token_digest
from starforge.server.services.observability import metricstore
from starforge.server.services.runs import jobs
from starforge.server.services.workflows import sweeps

MAX_KEYS_PER_QUERY = 500
DEFAULT_MAX_POINTS = 1000


# ---- ingest -------------------------------------------------------------------------------------


def check_token_absent() -> NoReturn:
    raise Unauthorized(
        "metrics ingest needs the run token header",
        hint="starforge.report sends it from STARFORGE_TOKEN, which the platform sets",
    )


def check_token(run: Run, token: str | None) -> None:
    if not token:
        check_token_absent()
    # Only the job's token: the runner's (lifecycle) token is not a way in, nor is any other run's.
    if run.job_token_sha256 is None or not hmac.compare_digest(
        run.job_token_sha256, token_digest(token)
    ):
        raise Forbidden(
            f"this token is not valid for run {run.id}",
            hint="a job can report only to its own run, with the STARFORGE_TOKEN of its current "
            "attempt",
        )


def authorized_run(session: Session, run_id: str, token: str | None) -> Run:
    """The run ``token`` may report into: it exists, the token is its current one, and it has
    not ended (a finished job's leftover token writes nothing)."""
    if not token:
        check_token_absent()
    run = session.get(Run, run_id)
    if run is None:
        raise RunNotFound(f"no run {run_id}")
    check_token(run, token)
    if JobStatus(run.status).is_terminal:
        raise Forbidden(
            f"run {run.id} has ended ({run.status}); it takes no more metrics",
            hint="a job reports only while its run is active",
            details={"run_id": run.id, "status": run.status},
        )
    return run


def authorize(rt: Runtime, run_id: str, token: str | None) -> None:
    """Refuse a request that may not report into ``run_id`` (before its body is read)."""
    with rt.transaction() as session:
        authorized_run(session, run_id, token)


def ingest(rt: Runtime, run_id: str, token: str | None, body: IngestRequest) -> IngestAck:
    """Store one batch from the job of ``run_id`` (which the token must belong to)."""
    rows, dropped = metricstore.points_of(run_id, body)
    metricstore.check_size(rows)
    at_rung = False
    with rt.transaction() as session:
        authorized_run(session, run_id, token)
        meta = session.get(RunMeta, run_id)
        before = meta.last_step if meta is not None else None
        metricstore.store(session, run_id, rows, body)
        now = max((r[2] for r in rows), default=None)
        if now is not None and (before is None or now > before):  # a new step: a rung?
            at_rung = sweeps.crossed(sweeps.rungs_of(session, run_id), before, now)
    if at_rung:  # judged before the answer: the job waits for it at a rung
        sweeps.judge_at_rung(rt, run_id)
    return IngestAck(stored=len(rows), dropped=dropped)


# ---- queries ------------------------------------------------------------------------------------


def downsample(steps: list[int], values: list[float], limit: int) -> tuple[list[int], list[float]]:
    """At most ``limit`` points: the first, the last, and each bucket's lowest and highest."""
    n = len(steps)
    if n <= limit:
        return steps, values
    if limit < 4:
        return [steps[0], steps[-1]][:limit], [values[0], values[-1]][:limit]
    buckets = (limit - 2) // 2
    keep = {0, n - 1}
    inner = n - 2
    for b in range(buckets):
        lo = 1 + b * inner // buckets
        hi = 1 + (b + 1) * inner // buckets
        if lo >= hi:
            continue
        chunk = range(lo, hi)
        keep.add(min(chunk, key=values.__getitem__))
        keep.add(max(chunk, key=values.__getitem__))
    order = sorted(keep)
    return [steps[i] for i in order], [values[i] for i in order]


def run_keys(session: Session, run_id: str) -> list[str]:
    return list(
        session.scalars(
            select(MetricPoint.key)
            .where(MetricPoint.run_id == run_id)
            .group_by(MetricPoint.key)
            .order_by(MetricPoint.key)
        )
    )


def _series(session: Session, run_id: str, key: str, max_points: int) -> MetricSeries | None:
    rows = session.execute(
        select(MetricPoint.step, MetricPoint.value)
        .where(MetricPoint.run_id == run_id, MetricPoint.key == key)
        .order_by(MetricPoint.step)
    ).all()
    if not rows:
        return None
    steps = [r[0] for r in rows]
    values = [r[1] for r in rows]
    shown_steps, shown_values = downsample(steps, values, max_points)
    return MetricSeries(
        key=key,
        steps=shown_steps,
        values=shown_values,
        count=len(steps),
        last_step=steps[-1],
        last_value=values[-1],
        downsampled=len(shown_steps) < len(steps),
    )


def series(
    rt: Runtime,
    user: users.Caller,
    ref: str,
    *,
    keys: list[str] | None = None,
    max_points: int = DEFAULT_MAX_POINTS,
) -> MetricsView:
    """The run's series for ``keys`` (all keys when none are named), each downsampled."""
    with rt.transaction() as session:
        run = jobs.resolve(session, user, ref)
        known = run_keys(session, run.id)
        wanted = [k for k in dict.fromkeys(keys) if k in known] if keys else known
        if len(wanted) > MAX_KEYS_PER_QUERY:
            raise UsageError(
                f"run {run.id} has {len(wanted)} metric keys; ask for at most "
                f"{MAX_KEYS_PER_QUERY} at once",
                hint="name the keys you want (repeat --key)",
            )
        found = [_series(session, run.id, k, max_points) for k in wanted]
        return MetricsView(run_id=run.id, keys=known, series=[s for s in found if s])


def meta(rt: Runtime, user: users.Caller, ref: str) -> RunMetaView:
    with rt.transaction() as session:
        run = jobs.resolve(session, user, ref)
        row = session.get(RunMeta, run.id)
        if row is None:
            return RunMetaView(run_id=run.id)
        return RunMetaView.model_validate(row, from_attributes=True)  # the row's own fields


def progress(rt: Runtime, user: users.Caller, run_ids: list[str]) -> ProgressList:
    """How far each of the user's named runs has logged (runs with no metrics are left out)."""
    if not run_ids:
        return ProgressList(runs=[])
    with rt.transaction() as session:
        rows = session.execute(
            select(RunMeta.run_id, RunMeta.last_step, RunMeta.updated_at)
            .join(Run, Run.id == RunMeta.run_id)
            .where(users.visible_runs(user), RunMeta.run_id.in_(run_ids[:1000]))
        ).all()
        return ProgressList(
            runs=[RunProgress(run_id=r[0], last_step=r[1], updated_at=r[2]) for r in rows]
        )


def count_points(rt: Runtime, run_id: str) -> int:
    """Every point stored for a run (for tests and benchmarks)."""
    with rt.transaction() as session:
        return int(
            session.scalar(
                select(func.count()).select_from(MetricPoint).where(MetricPoint.run_id == run_id)
            )
            or 0
        )
