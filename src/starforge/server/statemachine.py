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

What a change of status sets off (webhooks, an output dataset's publication) is owed in the same
transaction, as rows of the reactions outbox (:mod:`starforge.server.reactions`), which the leader's
handlers carry out: this module imports nothing above the database.

Success of a run with further ``--then`` steps queues the next step run in the same transaction
(:func:`start_next_step`): a step exists exactly when the success that starts it does. When a
step ends, the training run's reason says how its pipeline stands (:func:`note_pipeline`).

A node's record changes only through :func:`node_event`, which consults
:data:`~starforge.contract.states.NODE_TRANSITIONS`: an event the table rejects changes nothing
and returns None (runner reports are retried and may arrive twice or late; callers answer them
``accepted=False``). The record is replaced under its rank, which the attempt's mutable JSON
column notices, so the change is saved with the caller's transaction.

The hot paths (runner reports, placements, recorded starts) do not go through the session's unit
of work: :func:`load` reads a run and one attempt for update as plain objects outside the session
(:class:`Rows`), the same functions decide on them, and :func:`save` writes the columns that
changed as Core UPDATEs (a new attempt as one INSERT) in the caller's transaction. Every event is
one Core INSERT when its transition is decided (pending ORM rows are flushed first, so events
keep their order and a new run exists before its event).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

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
from starforge.server import pipeline, reactions
from starforge.server.db.models import Attempt, Event, Run, utcnow
from starforge.server.db.steps import RunStep


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


def admit_now(session: Session | sa.Connection, run: Run, *, reason: str, actor: str) -> None:
    """:func:`admit`, written at once as two INSERTs instead of through the session's unit of
    work (a third of a submit's CPU): ``run`` stays transient, its fields as committed. A racing
    run with the same idempotency key fails here, with IntegrityError. ``session``: a session or
    a bare connection inside the caller's transaction."""
    now = _queue(run, reason)
    columns = Run.__table__.columns.keys()
    given = sa.inspect(run).dict  # the fields set on it: the others take their column defaults
    # Plain Core: not even the ORM's bulk path.
    conn = session.connection() if isinstance(session, Session) else session
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
    event = {"run_id": run.id, "at": now, "src": src.value, "dst": dst.value}
    _record_event(session, {**event, "reason": reason, "actor": actor})
    # What the change sets off, owed in this same transaction (the leader's handlers do it).
    reactions.record(session, run, reactions.owed(run, dst), now)
    if dst is JobStatus.SUCCEEDED:
        start_next_step(session, run)
    if dst.is_terminal:
        note_pipeline(session, run)


def _record_event(session: Session, event: dict[str, Any]) -> None:
    """One INSERT now. Rows the session still holds go first: an event of a run admitted in this
    transaction needs the run (a foreign key), and the ids keep the order of the events."""
    if session.new:
        session.flush()
    session.connection().execute(_INSERT_EVENT, event)


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


def note_pipeline(session: Session, run: Run) -> None:
    """Say on the training run how its pipeline (``--then``) stands now that its step ``run``
    ended: the next step, done, or where and why it stopped short (a failed gate's words)."""
    step = (run.spec or {}).get("step")
    if not isinstance(step, dict) or not step.get("root_run_id"):
        return
    root = session.get(Run, str(step["root_run_id"]))
    if root is None or list((root.spec or {}).get("steps") or []) != step.get("actions"):
        return  # a standalone step (``sf export``) is no part of the training run's pipeline
    made = session.execute(
        sa.select(RunStep.position, RunStep.action, RunStep.run_id)
        .where(RunStep.root_run_id == root.id)
        .order_by(RunStep.position)
    ).all()
    action, index = str(step.get("action")), int(step.get("index") or 0)
    later = [(a, rid) for pos, a, rid in made if pos > index]
    if run.status != JobStatus.SUCCEEDED.value:
        text = f"pipeline stopped at step {action} ({run.id}), {run.status}: {run.reason}"
    elif later:
        text = f"step {action} ({run.id}) succeeded; next step: {later[0][0]} ({later[0][1]})"
    elif index + 1 < len(step.get("actions") or []):
        short = run.reason.split("; ", 1)[1] if "; " in run.reason else "not started"
        text = f"pipeline stopped after step {action} ({run.id}): {short}"
    else:
        text = "pipeline done: " + ", ".join(f"{a} ({rid})" for _, a, rid in made) + " succeeded"
    set_reason(root, f"{root.reason.split('; ', 1)[0]}; {text}")


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

    ``started``/``adopted`` record ``ref``; ``exited`` records ``exit_code``, ``end_reason`` and
    the runner's ``why`` (a startup failure's cause); ``lost`` and ``startup_failed`` mark the
    node lost with ``end_reason`` and ``why``; ``beat``
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
        update.update(exit_code=exit_code, end_reason=end_reason, lost=False, why=why)
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


# ---- rows outside the unit of work ---------------------------------------------------------------

_RUNS = Run.__table__
_ATTEMPTS = Attempt.__table__
_RUN_COLUMNS = tuple(_RUNS.columns.keys())
_ATTEMPT_COLUMNS = tuple(_ATTEMPTS.columns.keys())
_SELECT_RUN = sa.select(_RUNS).where(_RUNS.c.id == sa.bindparam("rid"))
_LOCK_RUN = _SELECT_RUN.with_for_update()
_LOCK_QUEUED = (
    sa.select(_RUNS)
    .where(_RUNS.c.id == sa.bindparam("rid"), _RUNS.c.status == JobStatus.QUEUED.value)
    .with_for_update(skip_locked=True)
)
_SELECT_ATTEMPT = sa.select(_ATTEMPTS).where(
    _ATTEMPTS.c.run_id == sa.bindparam("rid"), _ATTEMPTS.c.number == sa.bindparam("number")
)
_INSERT_ATTEMPT = sa.insert(_ATTEMPTS)


@dataclass
class Rows:
    """A run and one of its attempts as read by :func:`load`: plain objects outside the session
    (``run.attempts`` is not loaded; the attempt is this one). :func:`save` writes what changed.
    ``attempt`` may be set to a new attempt (no id yet), which :func:`save` inserts."""

    run: Run
    attempt: Attempt | None
    _run_was: dict[str, Any] = field(repr=False)
    _attempt_was: dict[str, Any] | None = field(repr=False)


def _values(row: Any, columns: tuple[str, ...]) -> dict[str, Any]:
    values = dict(row._mapping)
    # A JSON column's value is compared by equality after the decisions: keep copies of the
    # node records, which node_event replaces rank by rank.
    if isinstance(values.get("nodes"), dict):
        values["nodes"] = {k: dict(v) for k, v in values["nodes"].items()}
    return {c: values[c] for c in columns}


def _fresh(values: dict[str, Any]) -> dict[str, Any]:
    """The object's own copies of the node records (the snapshot must not change with it)."""
    if isinstance(values.get("nodes"), dict):
        return {**values, "nodes": {k: dict(v) for k, v in values["nodes"].items()}}
    return values


def load(
    session: Session, run_id: str, *, attempt: int | None = None, queued: bool = False
) -> Rows | None:
    """Lock ``run_id`` for this transaction and read it with its attempt ``attempt`` (its
    current one by default, none for 0); None when there is no such run (or, ``queued``, when it
    is no longer queued or another transaction holds it: ``FOR UPDATE SKIP LOCKED``). On SQLite
    the transaction already holds the writer lock and this is a read."""
    conn = session.connection()
    row = conn.execute(_LOCK_QUEUED if queued else _LOCK_RUN, {"rid": run_id}).one_or_none()
    if row is None:
        return None
    was = _values(row, _RUN_COLUMNS)
    run = Run(**_fresh(was))
    number = run.current_attempt if attempt is None else attempt
    found = None
    if number:
        found = conn.execute(_SELECT_ATTEMPT, {"rid": run_id, "number": number}).one_or_none()
    if found is None:
        return Rows(run, None, was, None)
    attempt_was = _values(found, _ATTEMPT_COLUMNS)
    return Rows(run, Attempt(**_fresh(attempt_was)), was, attempt_was)


def save(session: Session, rows: Rows) -> None:
    """Write what the decisions changed on ``rows``: one UPDATE per changed row, or the INSERT of
    a new attempt, in the caller's transaction."""
    conn = session.connection()
    if rows.attempt is not None:
        attempt = rows.attempt
        if attempt.id is None:  # a new attempt; the fields set on it, the others' defaults
            given = sa.inspect(attempt).dict
            values = {c: given[c] for c in _ATTEMPT_COLUMNS if c in given and c != "id"}
            if "nodes" in values:
                values["nodes"] = dict(values["nodes"])
            conn.execute(_INSERT_ATTEMPT, values)
        elif rows._attempt_was is not None and rows._attempt_was["id"] == attempt.id:
            _update(conn, _ATTEMPTS, attempt, rows._attempt_was)
        else:
            raise ValueError(f"attempt {attempt.number} of run {rows.run.id} was not loaded here")
    _update(conn, _RUNS, rows.run, rows._run_was)


_UPDATES: dict[tuple[str, tuple[str, ...]], sa.Update] = {}


def _update(conn: sa.Connection, table: sa.Table, obj: Any, was: dict[str, Any]) -> None:
    changed = {c: getattr(obj, c) for c in was if c != "id" and getattr(obj, c) != was[c]}
    if not changed:
        return
    if "nodes" in changed:
        changed["nodes"] = dict(changed["nodes"])  # a plain dict for the JSON column
    # One statement per set of columns, built once: a few shapes recur (a report, a placement).
    key = (table.name, tuple(changed))
    stmt = _UPDATES.get(key)
    if stmt is None:
        stmt = _UPDATES.setdefault(
            key,
            sa.update(table)
            .where(table.c.id == sa.bindparam("_id"))
            .values({c: sa.bindparam(f"_{c}") for c in changed}),
        )
    conn.execute(stmt, {"_id": obj.id, **{f"_{c}": v for c, v in changed.items()}})
