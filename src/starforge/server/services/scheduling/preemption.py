"""Checkpoint-first preemption: a higher-priority run that cannot fit takes the GPUs of
lower-priority runs that can resume, through the pause path, and they are requeued afterwards.

The decision (:func:`choose`) is pure. For each waiting run, in queue order, that the scheduler
left waiting for capacity: if it fits once the runs already releasing GPUs (pausing, stopping)
are gone, it needs nobody; else victims are taken among the running runs of LOWER priority that
can resume (a complete checkpoint exists) and were not preempted within
``preempt_min_interval_s``: lowest priority first, then the most recently started (it loses the
least work), until the run fits; victims it turns out not to need are dropped again. A run that
cannot fit even then preempts nobody. A run that cannot resume is never preempted.

:func:`preempt_pass` (one call at the end of each scheduler pass; a read-only look first, so a
pass with nothing to settle or preempt takes no write lock) first requeues the runs a
preemption paused (their latest checkpoint is where the next attempt starts), then applies the
decision: each victim goes ``pausing`` (SIGTERM: the training saves a checkpoint and exits, as
``sf job pause``) with actor ``preempted by RUN (priority P)`` and a ``preemptions`` row, committed
before any runner is signalled. The scheduler places by priority, so the freed GPUs go to the
preempting run, and the victim waits in the queue behind it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from starforge.contract.profiles import Pool
from starforge.contract.states import EndReason, JobStatus
from starforge.server import statemachine
from starforge.server.db.models import Run, utcnow
from starforge.server.db.sweeps import Preemption
from starforge.server.runtime import Runtime
from starforge.server.services.runs import actions, admission, checkpoints
from starforge.server.services.scheduling import dispatch, scheduler
from starforge.server.settings import NodeDef

log = logging.getLogger(__name__)
MAX_WAITING = 32  # waiting runs considered per pass: the head of the queue is what matters
RELEASING = frozenset({JobStatus.PAUSING, JobStatus.STOPPING})


@dataclass(frozen=True)
class Waiting:
    run_id: str
    priority: int
    pools: tuple[Pool, ...]


@dataclass(frozen=True)
class Holder:
    """An active run holding GPUs, as the decision sees it."""

    run_id: str
    priority: int
    status: JobStatus
    holds: tuple[tuple[str, tuple[int, ...]], ...]  # (node, GPU indices)
    resumable: bool = False
    started_at: datetime | None = None
    preempted_at: datetime | None = None  # the latest time it was preempted


@dataclass(frozen=True)
class Preempt:
    victim: str
    by: str
    by_priority: int


def _free(
    inventory: Sequence[NodeDef], holders: Iterable[Holder], gone: set[str], claimed: list[Holder]
) -> dict[str, scheduler.FreeNode]:
    held = [h for h in holders if h.run_id not in gone]
    return scheduler.free_gpus(inventory, ((n, g) for h in [*held, *claimed] for n, g in h.holds))


def _eligible(
    holders: Sequence[Holder], w: Waiting, gone: set[str], now: datetime, min_interval_s: float
) -> list[Holder]:
    calm = timedelta(seconds=min_interval_s)
    found = [
        h
        for h in holders
        if h.status is JobStatus.RUNNING
        and h.priority < w.priority
        and h.resumable
        and h.run_id not in gone
        and (h.preempted_at is None or now - h.preempted_at >= calm)
    ]
    started = datetime.min.replace(tzinfo=now.tzinfo)
    # Lowest priority first; then the youngest (it has the least work since its checkpoint).
    found.sort(key=lambda h: (h.priority, -(h.started_at or started).timestamp(), h.run_id))
    return found


def choose(
    waiting: Sequence[Waiting],
    holders: Sequence[Holder],
    inventory: Sequence[NodeDef],
    *,
    now: datetime,
    min_interval_s: float,
) -> list[Preempt]:
    """Which runs to preempt for which waiting runs (``waiting`` in queue order)."""
    gone = {h.run_id for h in holders if h.status in RELEASING}
    claimed: list[Holder] = []  # what earlier waiting runs will take, as if held
    out: list[Preempt] = []
    for w in waiting:
        slots = scheduler.place(w.pools, _free(inventory, holders, gone, claimed))
        victims: list[Holder] = []
        if slots is None:
            for candidate in _eligible(holders, w, gone, now, min_interval_s):
                victims.append(candidate)
                out_now = gone | {v.run_id for v in victims}
                slots = scheduler.place(w.pools, _free(inventory, holders, out_now, claimed))
                if slots is not None:
                    break
            if slots is None:
                continue  # not even every eligible victim makes room: preempt nobody
            for v in list(reversed(victims)):  # drop the victims it does not need
                rest = gone | {x.run_id for x in victims if x is not v}
                if scheduler.place(w.pools, _free(inventory, holders, rest, claimed)) is not None:
                    victims.remove(v)
            slots = scheduler.place(
                w.pools, _free(inventory, holders, gone | {v.run_id for v in victims}, claimed)
            )
            assert slots is not None
        gone |= {v.run_id for v in victims}
        out += [Preempt(v.run_id, w.run_id, w.priority) for v in victims]
        claimed.append(
            Holder(w.run_id, w.priority, JobStatus.QUEUED, tuple((s.node, s.gpus) for s in slots))
        )
    return out


# ---- the pass ---------------------------------------------------------------------------------


def actor_of(p: Preempt) -> str:
    return f"preempted by {p.by} (priority {p.by_priority})"


def _requeue_paused(rt: Runtime, session: Session) -> int:
    """Requeue the runs a preemption paused; close the records of runs that ended otherwise."""
    rows = session.execute(
        select(Preemption, Run).join(Run, Run.id == Preemption.run_id).where(~Preemption.requeued)
    ).all()
    count = 0
    for record, run in rows:
        status = JobStatus(run.status)
        if status in RELEASING:
            continue  # still saving its checkpoint
        record.requeued = True
        if status is not JobStatus.PAUSED:
            continue  # it failed, or a user stopped or resumed it meanwhile
        if run.current is not None:  # the attempt ended because it was preempted
            run.current.end_reason = EndReason.PREEMPTED.value
        out_dir = rt.storage.layout_of(run).out
        latest = checkpoints.latest(out_dir)
        start = (
            f"it continues from {latest.name} (step {latest.step})" if latest else "no checkpoint"
        )
        reason = (
            f"requeued after preemption by {record.by_run} (priority {record.by_priority}); {start}"
        )
        statemachine.transition(session, run, JobStatus.QUEUED, reason=reason, actor="preemption")
        count += 1
    return count


def _snapshot(rt: Runtime, session: Session) -> tuple[list[Waiting], list[Holder]]:
    last = rt.queue_pass
    if last is None:
        return [], []
    blocked = (scheduler.Blocker.CAPACITY, scheduler.Blocker.RESERVED)
    ids = [
        d.run_id
        for d in sorted(last.decisions.values(), key=lambda d: d.position)
        if not d.starts and d.blocker in blocked
    ][:MAX_WAITING]
    if not ids:
        return [], []
    rows = session.execute(
        select(Run.id, Run.priority, Run.pools).where(
            Run.id.in_(ids), Run.status == JobStatus.QUEUED.value
        )
    ).all()
    if not rows:
        return [], []
    top = max(priority for _, priority, _ in rows)
    lowest = session.scalar(
        select(func.min(Run.priority)).where(Run.status == JobStatus.RUNNING.value)
    )
    if lowest is None or lowest >= top:
        return [], []  # no running run has a lower priority than a waiting one: no victim
    found = {run_id: (priority, pools) for run_id, priority, pools in rows}
    waiting = [
        Waiting(i, found[i][0], tuple(admission.stored_pools(found[i][1])))
        for i in ids
        if i in found
    ]
    active = dispatch.active_attempts(session)
    latest = dict(
        session.execute(
            select(Preemption.run_id, func.max(Preemption.at))
            .where(Preemption.run_id.in_([r.id for r, _ in active]))
            .group_by(Preemption.run_id)
        ).all()
    )
    holders = [
        Holder(
            run.id,
            run.priority,
            JobStatus(run.status),
            tuple((str(s["node"]), tuple(s["gpus"])) for s in attempt.allocation),
            # Only a possible victim pays for a look at its checkpoints.
            resumable=run.priority < top
            and checkpoints.latest(rt.storage.layout_of(run).out) is not None,
            started_at=attempt.started_at,
            preempted_at=latest.get(run.id),
        )
        for run, attempt in active
    ]
    return waiting, holders


def _due(rt: Runtime, session: Session) -> bool:
    """Whether a preemption record waits to be settled or a waiting run would preempt now."""
    unsettled = select(Preemption.run_id).where(~Preemption.requeued).limit(1)
    if session.scalar(unsettled) is not None:
        return True
    waiting, holders = _snapshot(rt, session)
    if not waiting:
        return False
    min_interval_s = rt.settings.preempt_min_interval_s
    return bool(choose(waiting, holders, rt.inventory, now=utcnow(), min_interval_s=min_interval_s))


def preempt_pass(rt: Runtime) -> list[Preempt]:
    """Requeue what preemption paused, then preempt for the runs that wait for capacity."""
    if not rt.settings.preemption:
        return []
    with rt.reading() as session:  # most passes have nothing to do: ask without the writer lock
        if not _due(rt, session):
            return []
    refs: list[str] = []
    with rt.transaction() as session:  # decided again: the snapshot above only said it may be due
        requeued = _requeue_paused(rt, session)
        waiting, holders = _snapshot(rt, session)
        decided = choose(
            waiting,
            holders,
            rt.inventory,
            now=utcnow(),
            min_interval_s=rt.settings.preempt_min_interval_s,
        )
        done: list[Preempt] = []
        for p in decided:
            run = session.get(Run, p.victim, with_for_update=True)
            if run is None or JobStatus(run.status) is not JobStatus.RUNNING:
                continue
            reason = (
                f"{actor_of(p)}: it needs the GPUs; the training saves a checkpoint, "
                "then the run waits in the queue and resumes from it"
            )
            refs += actions.begin_pause(session, run, reason=reason, actor=actor_of(p))
            session.add(Preemption(run_id=run.id, by_run=p.by, by_priority=p.by_priority))
            done.append(p)
    for ref in refs:  # after commit: the decision is saved before it is acted on
        rt.executor.stop(ref, rt.settings.pause_grace_s)
    if done or requeued:
        log.info("preemption: %d run(s) preempted, %d requeued", len(done), requeued)
        rt.wake_scheduler()
    return done
