"""The only writer of ``runs.status`` and ``runs.reason``.

Every status change goes through :func:`transition` (or :func:`admit` for a new run), which checks
the table in :mod:`starforge.contract.states`, stamps the run's timestamps and appends one row to
``events`` in the caller's transaction. The caller commits; nothing here touches an executor.
Why a run is where it is (``runs.reason``) is written only here: by :func:`set_reason` with each
status change (or for one run the scheduler could not place), and by :func:`set_queued_reasons`
for the runs a scheduler pass keeps waiting (no event: that is not a change of status).

Timestamps: ``started_at`` is the first time the run reached ``running``; ``ended_at`` is set when
it reaches a terminal status and cleared when ``retry`` sends it back to the queue (together with
``end_reason`` and ``exit_code``, which describe only the latest ending).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session

from starforge.contract.errors import InvalidTransition
from starforge.contract.states import EndReason, JobStatus, can_transition
from starforge.server.db.models import Event, Run, utcnow


def admit(session: Session, run: Run, *, reason: str, actor: str) -> None:
    """Give a new run its first status, ``queued``, and its first event (from nothing)."""
    if run.status:
        raise InvalidTransition(f"run {run.id} already has status {run.status}")
    now = utcnow()
    run.status = JobStatus.QUEUED.value
    set_reason(run, reason, now)
    run.created_at = run.created_at or now
    run.updated_at = now
    session.add(run)
    session.add(Event(run_id=run.id, at=now, src=None, dst=run.status, reason=reason, actor=actor))


def transition(
    session: Session,
    run: Run,
    dst: JobStatus,
    *,
    reason: str,
    actor: str,
    end_reason: EndReason | None = None,
) -> None:
    """Move ``run`` to ``dst`` or raise :class:`InvalidTransition` leaving it untouched."""
    src = JobStatus(run.status)
    if not can_transition(src, dst):
        raise InvalidTransition(
            f"run {run.id} cannot go from {src} to {dst}",
            details={"run_id": run.id, "src": src.value, "dst": dst.value},
        )
    now = utcnow()
    run.status = dst.value
    set_reason(run, reason, now)
    run.updated_at = now
    if dst is JobStatus.RUNNING and run.started_at is None:
        run.started_at = now
    if dst is JobStatus.QUEUED:
        run.ended_at = None
        run.end_reason = None
        run.exit_code = None
    if dst.is_terminal:
        run.ended_at = now
    if end_reason is not None:
        run.end_reason = end_reason.value
    session.add(
        Event(run_id=run.id, at=now, src=src.value, dst=dst.value, reason=reason, actor=actor)
    )


def set_reason(run: Run, reason: str, now: datetime | None = None) -> bool:
    """Store why ``run`` is where it is; True when that changed (``updated_at`` moves then)."""
    if run.reason == reason:
        return False
    run.reason = reason
    run.updated_at = now or utcnow()
    return True


def set_queued_reasons(session: Session, reasons: Mapping[str, str]) -> None:
    """Store why each run id waits, for those still queued (one statement for any number: a
    pass over a long queue may change thousands of reasons at once)."""
    if not reasons:
        return
    table = Run.__table__
    stmt = (
        sa.update(table)
        .where(table.c.id == sa.bindparam("rid"), table.c.status == JobStatus.QUEUED.value)
        .values(reason=sa.bindparam("why"), updated_at=utcnow())
    )
    session.execute(stmt, [{"rid": rid, "why": why} for rid, why in reasons.items()])
