"""The only writer of ``runs.status``, ``runs.reason`` and each node's state (``attempts.nodes``).

Every status change goes through :func:`transition` (or :func:`admit` for a new run), which checks
the table in :mod:`starforge.contract.states`, stamps the run's timestamps and appends one row to
``events`` in the caller's transaction. The caller commits; nothing here touches an executor.
Why a run is where it is (``runs.reason``) is written only here: by :func:`set_reason` with each
status change (or for one run the scheduler could not place), and by :func:`set_queued_reasons`
for the runs a scheduler pass keeps waiting (no event: that is not a change of status).

Timestamps: ``started_at`` is the first time the run reached ``running``; ``ended_at`` is set when
it reaches a terminal status and cleared when ``retry`` sends it back to the queue (together with
``end_reason`` and ``exit_code``, which describe only the latest ending).

Success of a run with further ``--then`` steps queues the next step run in the same transaction
(:func:`start_next_step`): a step exists exactly when the success that starts it does.

A node's record changes only through :func:`node_event`, which consults
:data:`~starforge.contract.states.NODE_TRANSITIONS`: an event the table rejects changes nothing
and returns None (runner reports are retried and may arrive twice or late; callers answer them
``accepted=False``). The record is replaced under its rank, which the attempt's mutable JSON
column notices, so the change is saved with the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session

from starforge.contract.errors import InvalidTransition
from starforge.contract.nodes import NodeRecord
from starforge.contract.states import (
    EndReason,
    JobStatus,
    NodeEvent,
    NodeState,
    can_transition,
    next_node_state,
)
from starforge.server import pipeline
from starforge.server.db.models import Attempt, Event, Run, utcnow
from starforge.server.services import notify


def admit(session: Session, run: Run, *, reason: str, actor: str) -> None:
    """Give a new run its first status, ``queued``, and its first event (from nothing)."""
    now = _queue(run, reason)
    session.add(run)
    session.add(Event(run_id=run.id, at=now, src=None, dst=run.status, reason=reason, actor=actor))


def _queue(run: Run, reason: str) -> datetime:
    """A new run's first status on the object itself; returns the moment it was given."""
    if run.status:
        raise InvalidTransition(f"run {run.id} already has status {run.status}")
    now = utcnow()
    run.status = JobStatus.QUEUED.value
    set_reason(run, reason, now)
    run.created_at = run.created_at or now
    run.updated_at = now
    return now


_INSERT_RUN = sa.insert(Run.__table__)
_INSERT_EVENT = sa.insert(Event.__table__)


def admit_now(session: Session, run: Run, *, reason: str, actor: str) -> None:
    """:func:`admit`, written at once as two INSERTs instead of through the session's unit of
    work (a third of a submit's CPU): ``run`` stays transient, its fields as committed. A racing
    run with the same idempotency key fails here, with IntegrityError."""
    now = _queue(run, reason)
    columns = Run.__table__.columns.keys()
    given = sa.inspect(run).dict  # the fields set on it: the others take their column defaults
    conn = session.connection()  # plain Core: not even the ORM's bulk path
    conn.execute(_INSERT_RUN, {k: v for k, v in given.items() if k in columns})
    event = {"run_id": run.id, "at": now, "src": None, "dst": run.status}
    conn.execute(_INSERT_EVENT, {**event, "reason": reason, "actor": actor})


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
    if dst.is_terminal:  # webhooks owed, in this same transaction (an outbox)
        notify.enqueue(session, run, now)
    if dst is JobStatus.SUCCEEDED:
        start_next_step(session, run)


def start_next_step(session: Session, run: Run) -> Run | None:
    """Queue the pipeline's next step (``--then``) in the transaction that records ``run``'s
    success, so the step exists exactly when the success does (:mod:`starforge.server.pipeline`).
    """
    made = pipeline.next_step(session, run)
    if made is None:
        return None
    if isinstance(made, str):  # the pipeline stops short: say why on the run
        set_reason(run, f"{run.reason}; {made}")
        return None
    child, row = made
    action = row.action
    admit(session, child, reason=f"step {action} of {row.root_run_id}", actor="pipeline")
    session.flush()  # the step's row names the run: the run goes first
    session.add(row)
    set_reason(run, f"{run.reason}; next step: {action} ({child.id})")
    return child


def place_nodes(attempt: Attempt, nodes: dict[int, NodeRecord]) -> None:
    """Give a new attempt its nodes' first records (each ``pending``)."""
    if attempt.nodes:
        raise InvalidTransition(f"attempt {attempt.number} already has nodes")
    if any(r.state is not NodeState.PENDING for r in nodes.values()):
        raise InvalidTransition("a placed node starts pending")
    attempt.nodes = {str(rank): r.model_dump(mode="json") for rank, r in sorted(nodes.items())}


def node_event(
    attempt: Attempt,
    rank: int,
    event: NodeEvent,
    *,
    ref: str | None = None,
    exit_code: int | None = None,
    end_reason: EndReason | None = None,
    why: str = "",
    beat: float | None = None,
) -> NodeRecord | None:
    """Apply ``event`` to node ``rank`` of ``attempt``; its new record, or None when the table
    rejects the event (or the node does not exist), leaving the record untouched.

    ``started``/``adopted`` record ``ref``; ``exited`` records ``exit_code`` and ``end_reason``;
    ``lost`` and ``startup_failed`` mark the node lost with ``end_reason`` and ``why``; ``beat``
    (any runner report proves the runner alive) is stamped on any accepted event."""
    raw = (attempt.nodes or {}).get(str(rank))
    if raw is None:
        return None
    record = NodeRecord.read(raw)
    dst = next_node_state(record.state, event)
    if dst is None:
        return None
    update: dict[str, object] = {"state": dst}
    if event in (NodeEvent.STARTED, NodeEvent.ADOPTED):
        update["ref"] = ref
    elif event is NodeEvent.EXITED:
        update.update(exit_code=exit_code, end_reason=end_reason, lost=False)
    elif event in (NodeEvent.LOST, NodeEvent.STARTUP_FAILED):
        if event is NodeEvent.STARTUP_FAILED:
            end_reason = EndReason.STARTUP_FAILED
        update.update(exit_code=None, end_reason=end_reason, lost=True, why=why)
    if beat is not None:
        update["beat"] = beat
    new = record.model_copy(update=update)
    attempt.nodes[str(rank)] = new.model_dump(mode="json")
    if event in (NodeEvent.STARTED, NodeEvent.ADOPTED):
        # The attempt's reference names every started node's runner, in rank order.
        refs = [r.ref for r in attempt.node_records().values() if r.ref]
        attempt.executor_ref = ",".join(refs) or None
    return new


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
