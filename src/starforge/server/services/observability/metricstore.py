"""Writing a run's metric points, hyperparameters and metadata: the one writer of those tables.

Points are stored by (run, key, step), last write wins, with one driver-level executemany per
batch; within a batch the later of two values for the same (key, step) is the one kept.
Non-finite values and empty or overlong keys are dropped and counted, never stored.
Hyperparameters and metadata are merged key by key into the run's ``run_meta`` row, which also
keeps the highest step logged. Used by the job's ingest
(:mod:`starforge.server.services.observability.metrics`) and by the server's take of a run's spool
at its end (:mod:`starforge.server.services.observability.spooled`); both call it inside their own
transaction. Imports nothing above the database, so the code that ends a run may use it.
"""

from __future__ import annotations

import json
import math
from typing import Any

from sqlalchemy.orm import Session

from starforge.contract.api import IngestRequest
from starforge.contract.errors import UsageError
from starforge.server.db.metrics import MAX_KEY_LENGTH, MetricPoint, RunMeta
from starforge.server.db.models import Run, utcnow

MAX_POINTS_PER_BATCH = 100_000
MAX_META_BYTES = 1 << 20

Point = tuple[str, str, int, float, float]  # run_id, key, step, value, at


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


def _upsert(session: Session, rows: list[Point], *, replace: bool = True) -> None:
    """One executemany of the driver itself: at this volume, building SQLAlchemy parameters for
    each row would cost more than storing it. ``replace=False``: a point already stored stays."""
    connection = session.connection()
    dialect = connection.dialect
    if dialect.name not in ("sqlite", "postgresql"):  # pragma: no cover
        raise UsageError(f"metrics need SQLite or PostgreSQL, not {dialect.name}")
    mark = "?" if dialect.paramstyle == "qmark" else "%s"
    conflict = "DO UPDATE SET value = excluded.value, at = excluded.at" if replace else "DO NOTHING"
    sql = (
        f"INSERT INTO {MetricPoint.__tablename__} (run_id, key, step, value, at) "
        f"VALUES ({', '.join([mark] * 5)}) ON CONFLICT (run_id, key, step) {conflict}"
    )
    connection.exec_driver_sql(sql, rows)


def _merge_json(
    current: dict[str, Any] | None,
    update: dict[str, Any] | None,
    what: str,
    *,
    replace: bool = True,
) -> dict[str, Any]:
    if not update:
        return current or {}
    merged = {**(current or {}), **update} if replace else {**update, **(current or {})}
    text = json.dumps(merged, sort_keys=True, default=str)
    if len(text) > MAX_META_BYTES:
        raise UsageError(
            f"the run's {what} would exceed {MAX_META_BYTES} bytes",
            hint=f"log fewer or shorter {what}",
        )
    return dict(json.loads(text))


def check_size(rows: list[Point]) -> None:
    if len(rows) > MAX_POINTS_PER_BATCH:
        raise UsageError(
            f"a batch holds {len(rows)} points; at most {MAX_POINTS_PER_BATCH} are accepted",
            hint="send smaller batches (starforge.report does)",
        )


def store(
    session: Session, run_id: str, rows: list[Point], body: IngestRequest, *, replace: bool = True
) -> None:
    """Write a batch's points and merge its hyperparameters and metadata, in the caller's
    transaction. ``replace=False`` (a late batch of an older attempt): what is stored wins."""
    if rows:
        _upsert(session, rows, replace=replace)
    meta = session.get(RunMeta, run_id)
    if meta is None:
        meta = RunMeta(run_id=run_id, hparams={}, meta={})
        session.add(meta)
    meta.hparams = _merge_json(meta.hparams, body.hparams, "hyperparameters", replace=replace)
    meta.meta = _merge_json(meta.meta, body.meta, "metadata", replace=replace)
    if rows:
        top = max(r[2] for r in rows)
        meta.last_step = top if meta.last_step is None else max(meta.last_step, top)
    meta.updated_at = utcnow()


def store_late(session: Session, run: Run, body: IngestRequest) -> int:
    """Store a batch the job could not deliver itself (its spool, read at the run's end): as
    ``metrics.ingest`` would have, but a batch of an attempt older than the run's current one never
    replaces what is stored (the newer attempt re-logged those steps). Returns the points."""
    rows, _ = points_of(run.id, body)
    check_size(rows)
    store(session, run.id, rows, body, replace=body.attempt >= run.current_attempt)
    return len(rows)
