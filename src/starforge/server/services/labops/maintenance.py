"""Maintenance drain: take the cluster down without losing training.

``drain`` turns the flag on first (committed before anything else, in the database, so it
survives a restart and the scheduler's next pass starts nothing: submissions still queue, held
with the drain's reason), then pauses every active run that can resume, through the ordinary
pause path (:func:`starforge.server.services.runs.actions.pause`: SIGTERM, the training saves a
checkpoint and exits). A run *can resume* when its output already holds a checkpoint
(:func:`starforge.server.services.runs.checkpoints.latest`): pausing it loses at most the steps
since then, and the pause itself usually writes a newer one. A run with no checkpoint is a
*blocker*: it is left running (pausing it would restart it from nothing), and the drain says so,
until it saves one: while the drain is on, the leader's reconciler pauses every run that can resume
and is not paused yet (:func:`pause_resumable`, each tick). It is safe to restart the machines once
nothing is pausing and no blocker is left. The drain's record of a run it paused is written in the
pause's own transaction, so a crash never leaves a paused run that ``resume`` would not bring back.

The verdict also asks the executor what it still holds, since the database can be wrong about
it (a restored, older backup; a runner that outlived its attempt's end): a run the database calls
paused, queued or ended whose runner is still alive (``is_alive`` of its latest attempt's
references), and an attempt Slurm still runs that the database does not count
(:class:`~starforge.server.executors.base.SupportsLiveAttempts`), are blockers too. An executor
that cannot answer (Slurm's controller down) makes the verdict "not safe": it cannot be told.

``resume`` turns the flag off and requeues the runs the drain paused, in the order it paused
them; pausing and resuming never change a run's priority or submission time, which are the
queue's order, so they line up exactly where they were.
"""

from __future__ import annotations

import json
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from starforge.contract.auth import Role
from starforge.contract.labops import Blocker, MaintenanceStatus
from starforge.contract.states import JobStatus
from starforge.server.db.labops import Maintenance, MaintenancePaused
from starforge.server.db.models import Attempt, Run, utcnow
from starforge.server.executors import local
from starforge.server.executors.base import SupportsLiveAttempts
from starforge.server.runtime import Runtime
from starforge.server.services.access import users
from starforge.server.services.runs import actions, checkpoints

S = JobStatus
_RUNNING = [S.STARTING.value, S.RUNNING.value]
_HOLDING = [S.STARTING.value, S.RUNNING.value, S.STOPPING.value, S.PAUSING.value]
# A runner of an attempt that ended longer ago than this is not looked for (its pid may be reused).
_ENDED_LOOKBACK = timedelta(days=1)


def _row(session: Session) -> Maintenance:
    row = session.get(Maintenance, 1)
    if row is None:
        row = Maintenance(id=1, active=False, note="", started_by="")
        session.add(row)
    return row


def _no_checkpoint(rt: Runtime, run: Run) -> str | None:
    """Why ``run`` cannot resume from a checkpoint, or None when it can."""
    out = rt.storage.layout_of(run).out
    if checkpoints.latest(out) is None:
        return "no checkpoint yet: pausing it would restart its training from the beginning"
    return None


def drain(rt: Runtime, admin: users.Caller, note: str) -> MaintenanceStatus:
    """Stop dispatch, pause every run that can resume, and report the blockers."""
    with rt.transaction() as session:
        row = _row(session)
        if not row.active:
            row.active, row.started_by, row.started_at = True, admin.name, utcnow()
        row.note = note or row.note
    pause_resumable(rt)
    rt.wake_scheduler()
    return status(rt)


def pause_resumable(rt: Runtime) -> list[str]:
    """While a drain is on, pause each running run that can resume and is not paused by it yet
    (the leader's reconciler calls this every tick, so a run that had no checkpoint when the drain
    began is paused as soon as it saves one); return the runs paused."""
    with rt.reading() as session:
        row = session.get(Maintenance, 1)
        if row is None or not row.active:
            return []
        # The drain pauses as the admin who started it (its events name them).
        actor = users.Caller(row.started_by or "maintenance", Role.ADMIN)
        runs = session.scalars(
            select(Run)
            .where(Run.status.in_(_RUNNING), Run.id.not_in(select(MaintenancePaused.run_id)))
            .order_by(Run.created_at, Run.id)
        ).all()
        resumable = [r.id for r in runs if _no_checkpoint(rt, r) is None]
        seq = max(session.scalars(select(MaintenancePaused.seq)).all(), default=0)
    paused = []
    for run_id in resumable:
        seq += 1

        def record(session: Session, run: Run, seq: int = seq) -> None:
            # In the pause's own transaction: a crash never leaves a paused run that resume
            # would not bring back (nor a record of a pause that never happened).
            session.merge(MaintenancePaused(run_id=run.id, seq=seq, priority=run.priority))

        if actions.pause(rt, actor, run_id, also=record).accepted:  # else it ended meanwhile
            paused.append(run_id)
    return paused


def status(rt: Runtime) -> MaintenanceStatus:
    """The drain's state: what it paused, what still pauses, the blockers, whether it is safe."""
    with rt.transaction() as session:
        row = session.get(Maintenance, 1)
        paused_rows = session.execute(
            select(MaintenancePaused.run_id, Run.status)
            .join(Run, Run.id == MaintenancePaused.run_id)
            .order_by(MaintenancePaused.seq)
        ).all()
        held = {run_id for run_id, _ in paused_rows}
        active = session.scalars(
            select(Run).where(Run.status.in_(_HOLDING)).order_by(Run.created_at, Run.id)
        ).all()
        blockers = [
            Blocker(run_id=r.id, user=r.user, status=r.status, why=_why_blocks(rt, r))
            for r in active
            if r.id not in held
        ]
        unknown = _executor_holds(rt, session, blockers) if row is not None and row.active else ""
    if row is None or not row.active:
        return MaintenanceStatus(active=False, message="no maintenance: the scheduler runs")
    pausing = [run_id for run_id, st in paused_rows if st == S.PAUSING.value]
    safe = not pausing and not blockers and not unknown
    message = (
        "safe to restart: no run holds resources"
        if safe
        else f"not safe to restart yet: {len(pausing)} run(s) still saving a checkpoint, "
        f"{len(blockers)} blocker(s)" + (f"; {unknown}" if unknown else "")
    )
    return MaintenanceStatus(
        active=True,
        note=row.note,
        started_by=row.started_by,
        started_at=row.started_at,
        paused=[run_id for run_id, _ in paused_rows],
        pausing=pausing,
        blockers=blockers,
        executor_unknown=unknown,
        safe_to_restart=safe,
        message=message,
    )


def _executor_holds(rt: Runtime, session: Session, blockers: list[Blocker]) -> str:
    """Add to ``blockers`` the runs the executor still holds though the database says they hold
    nothing; return why the executor could not tell, or ``""``."""
    counted = {b.run_id for b in blockers}
    since = utcnow() - _ENDED_LOOKBACK
    latest = session.execute(
        select(Run, Attempt)
        .join(Attempt, (Attempt.run_id == Run.id) & (Attempt.number == Run.current_attempt))
        .where(Run.status.not_in(_HOLDING))
        .where(Attempt.ended_at.is_(None) | (Attempt.ended_at >= since))
        .order_by(Run.created_at, Run.id)
    ).all()
    try:
        for run, attempt in latest:
            refs = {rank: n.ref for rank, n in attempt.node_records().items() if n.ref}
            alive = next(
                (
                    ref
                    for rank, ref in refs.items()
                    if rt.executor.is_alive(ref) and _its_runner(rt, run, attempt, rank, ref)
                ),
                None,
            )
            if alive is not None and run.id not in counted:
                counted.add(run.id)
                why = f"{run.status} in the database, but its runner still runs ({alive})"
                blockers.append(Blocker(run_id=run.id, user=run.user, status=run.status, why=why))
        if isinstance(rt.executor, SupportsLiveAttempts):
            _unknown_attempts(session, rt.executor.live_attempts(), counted, blockers)
    except Exception as exc:  # Slurm's controller down, say: nothing can be promised
        said = getattr(exc, "message", None) or str(exc)
        return f"the executor cannot say what it still runs ({said})"
    return ""


def _its_runner(rt: Runtime, run: Run, attempt: Attempt, rank: int, ref: str) -> bool:
    """Whether a live local reference is still the attempt's runner, not a later process that
    got its pid (a run that ended a while ago); other executors' references name their jobs."""
    if not ref.startswith(local.PREFIX):
        return True
    record = rt.storage.layout_of(run).runner_record(attempt.number, rank)
    try:
        at = float(json.loads(record.read_text())["at"])
    except (OSError, ValueError, KeyError, TypeError):
        return True  # no record to tell by: as the executor says
    return local.started_by_then(ref, at)


def _unknown_attempts(
    session: Session,
    live: dict[tuple[str, int], str],
    counted: set[str],
    blockers: list[Blocker],
) -> None:
    """Blockers for the live attempts of this server's runs that the database does not count
    (an attempt a restored database never heard of, or a run it believes ended)."""
    ids = {run_id for run_id, _ in live}
    runs = {r.id: r for r in session.scalars(select(Run).where(Run.id.in_(ids)))}
    for (run_id, number), what in sorted(live.items()):
        run = runs.get(run_id)  # a run of another server on the same cluster is not ours
        if run is None or run_id in counted:
            continue
        if run.status in _HOLDING and number == run.current_attempt:
            continue  # a blocker or paused by the drain: counted above as what it is
        counted.add(run_id)
        why = f"{run.status} in the database, but attempt {number} still runs ({what})"
        blockers.append(Blocker(run_id=run.id, user=run.user, status=run.status, why=why))


def _why_blocks(rt: Runtime, run: Run) -> str:
    if run.status in (S.STOPPING.value, S.PAUSING.value):
        return f"{run.status}: it still holds its GPUs"
    why = _no_checkpoint(rt, run)
    if why:
        return f"{why}; the drain pauses it once it saves one"
    return "it can resume now: the drain pauses it within a second"


def resume(rt: Runtime, admin: users.Caller) -> MaintenanceStatus:
    """End maintenance: dispatch again and requeue the drain's paused runs in their order."""
    with rt.transaction() as session:
        _row(session).active = False
        paused = session.scalars(select(MaintenancePaused).order_by(MaintenancePaused.seq)).all()
        order = [(p.run_id, p.priority) for p in paused]
    kept: list[str] = []
    for run_id, priority in order:
        with rt.transaction() as session:
            run = session.get(Run, run_id)
            status_now = run.status if run is not None else None
            if run is not None:
                run.priority = priority  # the priority it had when the drain paused it
        if status_now == S.PAUSING.value:
            kept.append(run_id)  # still saving: `sf admin maintenance resume` again requeues it
            continue
        if status_now == S.PAUSED.value:
            actions.resume(rt, admin, run_id)
        with rt.transaction() as session:
            found = session.get(MaintenancePaused, run_id)
            if found is not None:
                session.delete(found)
    rt.wake_scheduler()
    result = status(rt)
    requeued = len(order) - len(kept)
    result.message = f"maintenance over: {requeued} paused run(s) requeued in their order"
    if kept:
        result.message += f"; {len(kept)} still pausing ({', '.join(kept)}): resume again"
    result.paused = kept
    return result
