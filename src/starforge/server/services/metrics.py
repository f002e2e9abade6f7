"""Run observability: metric points, hyperparameters and run metadata, written by the job itself.

Ingest is authenticated by the job's token (``STARFORGE_TOKEN``; only its sha256 is on the run,
renewed per attempt), so a job can write to its own run and nothing else; the runner's lifecycle
token is refused here, as the job's token is refused by lifecycle. Points are
stored by (run, key, step), last write wins, in one transaction per batch; within a batch the
later of two values for the same (key, step) is the one kept. Non-finite values and empty or
overlong keys are dropped and counted, never stored. Hyperparameters and metadata are merged
key by key into the run's ``run_meta`` row, which also keeps the highest step logged.

Queries read a run the user owns (by id or prefix), one series per key in step order; a series
longer than ``max_points`` is downsampled by keeping, per bucket of consecutive steps, its lowest
and highest value (plus the first and last point), so spikes survive and the shape stays true.
"""

from __future__ import annotations

import hmac
import json
import math
from typing import Any, NoReturn

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
from starforge.server.db.metrics import MAX_KEY_LENGTH, MetricPoint, RunMeta
from starforge.server.db.models import Run, utcnow
from starforge.server.runtime import Runtime
from starforge.server.services import jobs, users
from starforge.server.services.users import token_digest

MAX_POINTS_PER_BATCH = 100_000
MAX_KEYS_PER_QUERY = 500
DEFAULT_MAX_POINTS = 1000
MAX_META_BYTES = 1 << 20

Point = tuple[str, str, int, float, float]  # run_id, key, step, value, at


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


def points_of(run_id: str, body: IngestRequest) -> tuple[list[Point], int]:
    """The batch as rows, one per (key, step) with the last value given; and how many dropped."""
    latest: dict[tuple[str, int], Point] = {}
    dropped = 0
    isfinite = math.isfinite
    for entry in body.steps:
        step, at = entry.step, entry.t
        for key, value in entry.values.items():
            if not key or len(key) > MAX_KEY_LENGTH or not isfinite(value):
                dropped += 1
                continue
            latest[(key, step)] = (run_id, key, step, value, at)
    return list(latest.values()), dropped


def _upsert(session: Session, rows: list[Point]) -> None:
    """One executemany of the driver itself: at this volume, building SQLAlchemy parameters for
    each row would cost more than storing it."""
    connection = session.connection()
    dialect = connection.dialect
    if dialect.name not in ("sqlite", "postgresql"):  # pragma: no cover
        raise UsageError(f"metrics need SQLite or PostgreSQL, not {dialect.name}")
    mark = "?" if dialect.paramstyle == "qmark" else "%s"
    sql = (
        f"INSERT INTO {MetricPoint.__tablename__} (run_id, key, step, value, at) "
        f"VALUES ({', '.join([mark] * 5)}) "
        "ON CONFLICT (run_id, key, step) DO UPDATE SET value = excluded.value, at = excluded.at"
    )
    connection.exec_driver_sql(sql, rows)


def _merge_json(
    current: dict[str, Any] | None, update: dict[str, Any] | None, what: str
) -> dict[str, Any]:
    if not update:
        return current or {}
    merged = {**(current or {}), **update}
    text = json.dumps(merged, sort_keys=True, default=str)
    if len(text) > MAX_META_BYTES:
        raise UsageError(
            f"the run's {what} would exceed {MAX_META_BYTES} bytes",
            hint=f"log fewer or shorter {what}",
        )
    return dict(json.loads(text))


def ingest(rt: Runtime, run_id: str, token: str | None, body: IngestRequest) -> IngestAck:
    """Store one batch from the job of ``run_id`` (which the token must belong to)."""
    rows, dropped = points_of(run_id, body)
    if len(rows) > MAX_POINTS_PER_BATCH:
        raise UsageError(
            f"a batch holds {len(rows)} points; at most {MAX_POINTS_PER_BATCH} are accepted",
            hint="send smaller batches (starforge.report does)",
        )
    with rt.transaction() as session:
        authorized_run(session, run_id, token)
        if rows:
            _upsert(session, rows)
        meta = session.get(RunMeta, run_id)
        if meta is None:
            meta = RunMeta(run_id=run_id, hparams={}, meta={})
            session.add(meta)
        meta.hparams = _merge_json(meta.hparams, body.hparams, "hyperparameters")
        meta.meta = _merge_json(meta.meta, body.meta, "metadata")
        if rows:
            top = max(r[2] for r in rows)
            meta.last_step = top if meta.last_step is None else max(meta.last_step, top)
        meta.updated_at = utcnow()
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
    user: str,
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


def meta(rt: Runtime, user: str, ref: str) -> RunMetaView:
    with rt.transaction() as session:
        run = jobs.resolve(session, user, ref)
        row = session.get(RunMeta, run.id)
        if row is None:
            return RunMetaView(run_id=run.id)
        return RunMetaView.model_validate(row, from_attributes=True)  # the row's own fields


def progress(rt: Runtime, user: str, run_ids: list[str]) -> ProgressList:
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
