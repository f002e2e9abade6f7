"""The queue as the scheduler sees it, and why each queued run waits.

* Reading: :func:`read_snapshot` reads everything one pass needs (queued runs, what active runs
  hold, every user's limits) in one read-only transaction, which on SQLite takes no write lock,
  so a long queue never holds back a submit or a runner's event while it is read. A queued run
  is read as its raw column values (no JSON or timestamp decoding per row) and parsed only when
  those values differ from what an earlier pass parsed (:class:`QueueMemo`): pass after pass,
  a long queue costs one plain read, not 10,000 decodings.
* Deciding again only on news: the plan is a pure function of what the pass read, so when the
  queue, the holdings, the limits and the holds are exactly those of the latest plan and no run
  has outwaited the fair-share patience since, a pass keeps that plan instead of computing it
  again (a tick on a cluster whose free GPUs fit no queued run, say).
* Deciding: :func:`decide` runs the pure pass
  (:func:`starforge.server.services.scheduling.scheduler.plan`) with every waiting run explained,
  and keeps the result on the runtime as the latest
  :class:`~starforge.server.services.scheduling.scheduler.QueuePass`. That pass is the only place a
  plan is computed: views of runs (:func:`explain`, ``sf job ls``, ``GET /runs/{id}``, the log
  stream's status events) read it.
  A run the latest pass has not seen yet (submitted since) shows its stored reason and its place
  by priority and age; the scheduler loop runs a pass on every wake-up, or, for arrivals to a
  full cluster, at most :data:`EXPLAIN_S` later (:func:`arrivals_can_wait`), so that is brief.
* Storing: :func:`save_reasons` writes each waiting run's one-line reason when it changed, through
  :func:`starforge.server.statemachine.set_queued_reasons` (``statemachine`` is the one writer
  of ``runs.reason``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection, func, select
from sqlalchemy.orm import Session

from starforge.contract.api import PendingView, RunView
from starforge.contract.profiles import Pool
from starforge.contract.states import ACTIVE, JobStatus
from starforge.server import statemachine
from starforge.server.db import labops
from starforge.server.db.engine import read_only
from starforge.server.db.models import Attempt, Run, utcnow
from starforge.server.runtime import Runtime
from starforge.server.services.runs import admission
from starforge.server.services.scheduling import accounting, quotas, scheduler

REFRESH_S = 10.0  # a full cluster still gets a pass this often: fair share's patience moves runs
EXPLAIN_S = 1.0  # arrivals to a full cluster are explained by a pass at most this much later
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SHAPES_KEPT = 1024  # distinct stored pools a memo keeps derived (a queue has a handful)
_ACTIVE = [s.value for s in ACTIVE]

HOLDINGS = (
    select(Run.id, Run.user, Attempt.allocation)
    .join(Attempt, Attempt.run_id == Run.id)
    .where(
        Run.status.in_(_ACTIVE),
        Attempt.number == Run.current_attempt,
        Attempt.ended_at.is_(None),
    )
)
# Raw values: the timestamp as the driver returns it and the pools as stored text, so a row
# costs no decoding; :class:`QueueMemo` parses each run once, and again only if these change.
_QUEUE = select(
    Run.id,
    Run.user,
    Run.priority,
    sa.type_coerce(Run.created_at, sa.String),
    sa.cast(Run.pools, sa.Text),
    Run.reason,
).where(Run.status == JobStatus.QUEUED.value)


# ---- stored JSON, read in one place each ---------------------------------------------------------


def _slots(allocation: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """An attempt's stored allocation (``[{"node", "gpus"}, ...]``)."""
    return list(allocation or [])


def _pools(stored: list[dict[str, Any]] | None) -> tuple[Pool, ...]:
    """A run's stored pools (read leniently: a newer server may have added fields)."""
    return tuple(admission.stored_pools(stored or []))


def to_holdings(rows: Iterable[Sequence[Any]]) -> list[scheduler.Holding]:
    """Rows of :data:`HOLDINGS` as the GPUs each active run holds per node."""
    return [
        scheduler.Holding(run_id, user, str(slot["node"]), tuple(slot["gpus"]))
        for run_id, user, allocation in rows
        for slot in _slots(allocation)
    ]


def holdings(session: Session) -> list[scheduler.Holding]:
    """GPUs held by the current, unfinished attempts of active runs (as dispatch counts them)."""
    return to_holdings(session.execute(HOLDINGS).all())


# ---- one pass ------------------------------------------------------------------------------------


@dataclass
class Snapshot:
    queue: list[scheduler.QueuedRun] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)  # stored reason per queued run
    holdings: list[scheduler.Holding] = field(default_factory=list)
    limits: dict[str, scheduler.Limits] = field(default_factory=dict)
    default: scheduler.Limits = scheduler.UNLIMITED
    wakeups: int = 0  # the runtime's wake-up count when the snapshot was read
    urgent: int = 0  # and its count of urgent wake-ups (all but arrivals)
    held: dict[str, str] = field(default_factory=dict)  # run id -> why it may not start now
    version: int = 0  # the memo's count of changed queues when this snapshot was read


@dataclass(frozen=True)
class _Planned:
    """The latest plan, and what it was computed from (beside the queue the memo holds)."""

    version: int  # of the queue it planned (:attr:`QueueMemo.version`)
    inputs: tuple[Any, ...]
    overdue_before: datetime
    decisions: list[scheduler.Decision]
    result: scheduler.QueuePass


RawRow = tuple[str, int, Any, str]  # (user, priority, created_at, pools) as read


@dataclass
class QueueMemo:
    """The queued runs an earlier pass parsed, each with the raw values it was parsed from.

    A run is parsed again only when its raw values differ (a changed priority, say), so the
    memo never answers with a stale run; it keeps only the runs of the latest read. An unchanged
    run keeps its very entry, so a pass over a long queue leaves few new objects behind."""

    runs: dict[str, tuple[RawRow, scheduler.QueuedRun]] = field(default_factory=dict)
    shapes: dict[str, scheduler.QueuedRun] = field(default_factory=dict)  # by pools as stored
    version: int = 0  # moves whenever a read finds runs other than the read before it did
    planned: _Planned | None = None

    def read(
        self, conn: Connection, rows: Iterable[Sequence[Any]]
    ) -> tuple[list[scheduler.QueuedRun], dict[str, str]]:
        """The queued runs of ``rows`` (of :data:`_QUEUE`, iterated once: a row is dropped as
        soon as it is read), in their order, and each one's stored reason."""
        created_at = Run.__table__.c.created_at.type
        to_datetime = created_at.dialect_impl(conn.dialect).result_processor(conn.dialect, None)
        old, runs = self.runs, {}
        found: list[scheduler.QueuedRun] = []
        reasons: dict[str, str] = {}
        parsed = 0
        for run_id, user, priority, created, pools, reason in rows:
            raw = (user, priority, created, pools)
            entry = old.get(run_id)
            if entry is None or entry[0] != raw:
                parsed += 1
                when = to_datetime(created) if to_datetime is not None else created
                entry = (raw, self._shape(pools).like(run_id, user, priority, when))
            runs[run_id] = entry
            found.append(entry[1])
            reasons[run_id] = reason
        self.runs = runs
        if parsed or len(runs) != len(old):  # else the same ids (unique), each unchanged
            self.version += 1
        return found, reasons

    def _shape(self, pools: str) -> scheduler.QueuedRun:
        """A run of these stored pools, their derived fields computed once (a queue has a few)."""
        shape = self.shapes.get(pools)
        if shape is None:
            if len(self.shapes) >= _SHAPES_KEPT:
                self.shapes.clear()
            shape = scheduler.QueuedRun("", "", 0, _EPOCH, _pools(json.loads(pools)))
            self.shapes[pools] = shape
        return shape


def read_snapshot(rt: Runtime) -> Snapshot:
    """Everything one pass reads, as one consistent read that takes no write lock."""
    # Before reading: a wake-up during the read makes the next pass run.
    wakeups, urgent = rt.wakeups, rt.urgent_wakeups
    memo = rt.queue_memo = rt.queue_memo or QueueMemo()
    with read_only(rt.engine) as conn:
        queue, reasons = memo.read(conn, conn.execute(_QUEUE).yield_per(1000))
        held = conn.execute(HOLDINGS).all()
        limits = quotas.of_rows(conn.execute(quotas.ALL_ROWS).all())
        drain = labops.drain_note(conn)
        spent = accounting.over_daily_quota(conn, rt.settings, {run.user for run in queue})
    snap = Snapshot(
        queue=queue,
        reasons=reasons,
        holdings=to_holdings(held),
        limits={user: scheduler.Limits.of(q) for user, q in limits.items()},
        default=scheduler.Limits.of(quotas.defaults(rt.settings)),
        wakeups=wakeups,
        urgent=urgent,
        version=memo.version,
    )
    if drain or spent:
        snap.held = {
            run.id: drain or spent[run.user] for run in queue if drain or run.user in spent
        }
    return snap


def any_gpu_free(rt: Runtime) -> bool:
    """Whether any GPU of the inventory is free."""
    with read_only(rt.engine) as conn:
        held = to_holdings(conn.execute(HOLDINGS).all())
    free = scheduler.free_gpus(rt.inventory, ((h.node, h.gpus) for h in held))
    return any(node.free for node in free.values())


def needs_pass(rt: Runtime) -> bool:
    """Whether a pass may start or explain anything new. On a full cluster a pass starts nothing:
    it runs only when the queue may have changed since the latest pass (a wake-up), or when that
    pass is older than ``REFRESH_S``; else it is skipped without reading the queue."""
    last = rt.queue_pass
    if last is None or last.wakeups != rt.wakeups or time.monotonic() - last.at >= REFRESH_S:
        return True
    return any_gpu_free(rt)


_ARRIVALS = select(func.max(Run.priority), func.min(Run.gpus)).where(
    Run.status == JobStatus.QUEUED.value
)
_LOWEST_RUNNING = select(func.min(Run.priority)).where(Run.status == JobStatus.RUNNING.value)


def arrivals_can_wait(rt: Runtime) -> bool:
    """Whether the loop may leave a pass for later: only arrivals woke it since the latest pass
    (no run ended, nothing was stopped, no quota changed), that pass is younger than
    ``EXPLAIN_S``, and no queued run can start or preempt now, because no GPU is free, every
    queued run needs one, and none outranks a running run (with preemption on).

    The database is read, not the wake-ups: whatever freed a GPU, woken or not, ends the wait.
    A pass over a long queue costs O(queue), so a burst of submissions to a full cluster would
    otherwise pay O(queue) per submission; the arrivals are explained by a pass at most
    ``EXPLAIN_S`` later (until then their views show the stored reason and place)."""
    last = rt.queue_pass
    if last is None or last.wakeups == rt.wakeups or last.urgent != rt.urgent_wakeups:
        return False  # nothing new (the tick's business), or something other than arrivals
    if time.monotonic() - last.at >= EXPLAIN_S:
        return False
    with read_only(rt.engine) as conn:
        held = to_holdings(conn.execute(HOLDINGS).all())
        top, least_gpus = conn.execute(_ARRIVALS).one()
        lowest = conn.scalar(_LOWEST_RUNNING) if rt.settings.preemption else None
    free = scheduler.free_gpus(rt.inventory, ((h.node, h.gpus) for h in held))
    if any(node.free for node in free.values()):
        return False
    if least_gpus is not None and least_gpus <= 0:
        return False  # a run of no GPU (an export step) starts on a full cluster
    return not (top is not None and lowest is not None and top > lowest)


def decide(rt: Runtime, snap: Snapshot) -> list[scheduler.Decision]:
    """One pass over ``snap``, every waiting run explained; kept as the runtime's latest pass.
    The latest plan is kept when nothing it was computed from has changed (:func:`_replan`)."""
    overdue_before = utcnow() - timedelta(seconds=rt.settings.fair_share_patience_s)
    memo = rt.queue_memo = rt.queue_memo or QueueMemo()
    holdings = sorted(snap.holdings, key=lambda h: (h.node, h.run_id, h.gpus))
    inputs = (tuple(rt.inventory), tuple(holdings), snap.limits, snap.default, snap.held)
    last = memo.planned
    if last is not None and not _replan(snap, last, inputs, overdue_before):
        decisions = list(last.decisions)
        now = time.monotonic()
        result = replace(last.result, wakeups=snap.wakeups, at=now, urgent=snap.urgent)
    else:
        decisions = scheduler.plan(
            [r for r in snap.queue if r.id not in snap.held] if snap.held else snap.queue,
            rt.inventory,
            snap.holdings,
            snap.limits,
            default=snap.default,
            explain_all=True,
            overdue_before=overdue_before,
        )
        decisions += held_decisions(snap, len(decisions))
        result = scheduler.QueuePass.after(decisions, snap.wakeups, time.monotonic(), snap.urgent)
    memo.planned = _Planned(snap.version, inputs, overdue_before, list(decisions), result)
    rt.queue_pass = result
    return decisions


def _replan(
    snap: Snapshot, last: _Planned, inputs: tuple[Any, ...], overdue_before: datetime
) -> bool:
    """Whether the plan must be computed again: the queue, the holdings, limits, holds or
    inventory differ from the latest plan's, or a run has outwaited the patience since (it goes
    ahead of fair share now)."""
    if snap.version != last.version or inputs != last.inputs:
        return True
    since = last.overdue_before
    return any(since <= run.created_at < overdue_before for run in snap.queue)


def held_decisions(snap: Snapshot, before: int) -> list[scheduler.Decision]:
    """The runs a drain or a used-up daily quota holds, after the planned ones, in queue order."""
    held = scheduler.order_queue(r for r in snap.queue if r.id in snap.held)
    return [
        scheduler.Decision(r.id, r.user, before + i, scheduler.Blocker.HELD, snap.held[r.id])
        for i, r in enumerate(held, start=1)
    ]


def save_reasons(rt: Runtime, snap: Snapshot, decisions: Iterable[scheduler.Decision]) -> int:
    """Store the reason of every still-queued waiting run whose reason changed; returns how many."""
    changed = {
        d.run_id: d.reason
        for d in decisions
        if not d.starts and snap.reasons.get(d.run_id) != d.reason
    }
    if changed:
        with rt.transaction() as session:
            statemachine.set_queued_reasons(session, changed)
    return len(changed)


# ---- views ---------------------------------------------------------------------------------------


def pending_view(d: scheduler.Decision, position: int, queued: int) -> PendingView:
    message = d.reason
    if d.starts:
        message = f"{d.reason}: the scheduler is starting it"
    return PendingView(
        position=position,
        queued=queued,
        blocker=d.blocker.value,
        message=message,
        detail=d.detail,
        blocking_runs=list(d.blocking_runs),
        next_event=d.next_event,
        reserved_nodes=list(d.reserved_nodes),
    )


def decision(rt: Runtime, run_id: str) -> tuple[scheduler.Decision, int, int] | None:
    """The latest pass's decision on a run, its place and the queue's length after that pass
    (None when that pass did not see the run)."""
    last = rt.queue_pass
    if last is None or run_id not in last.decisions:
        return None
    return last.decisions[run_id], last.places[run_id], last.queued


def explain(rt: Runtime, session: Session, runs: Sequence[tuple[Run, RunView]]) -> None:
    """Give each queued view its place and why it waits, from the latest pass; a run that pass
    has not seen keeps its stored reason and gets its place by priority and age."""
    for run, v in runs:
        if v.status != JobStatus.QUEUED:
            continue
        found = decision(rt, v.run_id)
        if found is None:
            v.queue_position = priority_position(session, run)
            continue
        v.queue_position = found[1]
        v.pending = pending_view(*found)
        v.reason = v.pending.message


def reason_of(rt: Runtime, run_id: str, status: JobStatus, stored: str) -> str:
    """What a view says about why the run is where it is (the latest pass's word if queued)."""
    found = decision(rt, run_id) if status == JobStatus.QUEUED else None
    return pending_view(*found).message if found is not None else stored


_PRIORITY, _CREATED, _ID = (sa.bindparam(k) for k in ("priority", "created", "id"))
_RUNS = Run.__table__.c  # table columns: a Core COUNT, without the ORM's statement machinery
_AHEAD = (
    select(func.count())
    .select_from(Run.__table__)
    .where(
        _RUNS.status == JobStatus.QUEUED.value,
        sa.or_(
            _RUNS.priority > _PRIORITY,
            sa.and_(
                _RUNS.priority == _PRIORITY,
                sa.or_(
                    _RUNS.created_at < _CREATED,
                    sa.and_(_RUNS.created_at == _CREATED, _RUNS.id < _ID),
                ),
            ),
        ),
    )
)


def priority_position(session: Session | Connection, run: Run) -> int:
    """1-based place of a queued run by priority then age (what a single user sees), in one
    COUNT over the index ``ix_runs_queue_order`` alone: the cheap answer at submit, whatever the
    length of the queue. A plain Core read: it sees what the transaction has written, not
    objects pending in a session."""
    params = {"priority": run.priority, "created": run.created_at, "id": run.id}
    return int(session.scalar(_AHEAD, params) or 0) + 1
