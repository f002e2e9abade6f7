"""Sweeps: admit a grid of variants as normal runs, show them ranked, stop them, early-stop them.

:func:`submit` admits every variant first (the same admission as ``POST /jobs``, one package for
all), then writes the sweep and all its runs in ONE transaction: a sweep is created whole or not
at all, and a resent request (same user, same idempotency key) answers with the sweep it made.
Each variant is a run like any other: its spec carries the sweep tag (``JobSpec.sweep``) and its
hyperparameters are the common ones plus the variant's.

:func:`early_stop_pass` (the leader's sweep loop) applies ASHA (``services/workflows/asha``) to
every sweep with early stopping that still has active variants, with actor ``sweep S-ID``: a variant
ruled out is stopped as ``sf job stop`` stops a run (``actions.begin_stop``) and ends
``early_stopped``, its reason naming the sweep, the rung and the metric's value; a variant that must
wait at its rung is held, ``pausing`` like ``sf job pause`` (its checkpoint saved, its GPUs and
quota freed for the variants the rung waits on); a held variant that is promoted goes back to
``queued`` and continues from its checkpoint. Each decision is committed before any runner is
signalled, and is taken again from the database (metrics, statuses, events) on every pass, so a
killed pass is redone.
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload

from starforge.contract.api import ActionResult, RunView, SubmitRequest, SubmitResponse
from starforge.contract.errors import NotFound
from starforge.contract.jobspec import SweepTag
from starforge.contract.states import ACTIVE, EndReason, JobStatus
from starforge.contract.sweeps import EarlyStop, SweepCreated, SweepRequest, SweepView, VariantView
from starforge.server import statemachine
from starforge.server.db.metrics import MetricPoint
from starforge.server.db.models import Run
from starforge.server.db.sweeps import Sweep, SweepRun
from starforge.server.runtime import Runtime
from starforge.server.services.access import users
from starforge.server.services.data import blobs
from starforge.server.services.runs import actions, admission, checkpoints, jobs, lifecycle
from starforge.server.services.scheduling import quotas
from starforge.server.services.workflows import asha

log = logging.getLogger(__name__)
_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
SWEEP_REF = re.compile(r"^s-[0-9a-z]{1,10}$")
# A paused variant is still the sweep's (held at a rung, or paused by its user): it may report.
STOPPABLE_BY_SWEEP = frozenset({JobStatus.QUEUED, JobStatus.PAUSED, *ACTIVE}) - {JobStatus.STOPPING}


def new_sweep_id() -> str:
    return "s-" + "".join(secrets.choice(_ALPHABET) for _ in range(10))


# ---- submit -----------------------------------------------------------------------------------


def variant_request(req: SweepRequest, sweep_id: str, index: int) -> SubmitRequest:
    """The submission of variant ``index``: the common spec, its parameters, its sweep tag."""
    params = req.variants[index]
    spec = req.spec.model_copy(
        update={
            "hyperparams": {**req.spec.hyperparams, **params},
            "sweep": SweepTag(id=sweep_id, index=index, params=params),
        }
    )
    return SubmitRequest(
        spec=spec,
        manifest=req.manifest,
        idempotency_key=f"{req.idempotency_key}:{index}",
        max_retries=req.max_retries,
    )


def _admit_all(rt: Runtime, user: str, requests: list[SubmitRequest]) -> list[admission.Admitted]:
    with rt.transaction() as session:
        context = jobs.admission_context(rt, session, user)
    blobs.require_owned(rt, user, requests[0].manifest.digests())  # before any blob is read
    storage = rt.storage.pinned(requests[0].manifest.digests())  # every variant's package
    return [jobs.admit_request(rt, user, r, context, storage) for r in requests]


def _existing(session: Session, user: str, key: str) -> SweepCreated | None:
    sweep = session.scalars(
        select(Sweep).where(Sweep.user == user, Sweep.idempotency_key == key)
    ).one_or_none()
    if sweep is None:
        return None
    members = _members(session, sweep.id)
    return SweepCreated(
        sweep_id=sweep.id,
        created=False,
        runs=[jobs.submit_response(session, run, created=False, warnings=[]) for _, run in members],
    )


def submit(rt: Runtime, user: str, req: SweepRequest) -> SweepCreated:
    """Admit every variant, then create the sweep and all its runs at once."""
    with rt.transaction() as session:
        found = _existing(session, user, req.idempotency_key)
        if found is not None:
            return found
        priority = quotas.effective(session, rt.settings, user)[0].priority
    sweep_id = new_sweep_id()
    requests = [variant_request(req, sweep_id, i) for i in range(len(req.variants))]
    admitted = _admit_all(rt, user, requests)
    grid: dict[str, list[Any]] = {}
    for variant in req.variants:
        for key, value in variant.items():
            if value not in grid.setdefault(key, []):
                grid[key].append(value)
    runs = [jobs.new_run(user, r, a) for r, a in zip(requests, admitted, strict=True)]
    try:
        with rt.transaction() as session:
            session.add(
                Sweep(
                    id=sweep_id,
                    user=user,
                    project=req.spec.project,
                    experiment=req.spec.experiment,
                    idempotency_key=req.idempotency_key,
                    grid=grid,
                    early_stop=req.early_stop.model_dump(mode="json") if req.early_stop else None,
                )
            )
            session.flush()  # the sweep row before the rows that point at it
            for index, run in enumerate(runs):
                run.priority = priority
                statemachine.admit(
                    session, run, reason=f"waiting for the scheduler (sweep {sweep_id})", actor=user
                )
                session.flush()
                session.add(
                    SweepRun(
                        sweep_id=sweep_id, run_id=run.id, index=index, params=req.variants[index]
                    )
                )
    except IntegrityError:  # the same key committed meanwhile: answer with that sweep
        with rt.transaction() as session:
            found = _existing(session, user, req.idempotency_key)
            if found is None:
                raise
            return found
    rt.wake_scheduler(arrival=True)
    with rt.transaction() as session:
        answers: list[SubmitResponse] = []
        for run, a in zip(runs, admitted, strict=True):
            fresh = session.get(Run, run.id)
            assert fresh is not None
            answers.append(jobs.submit_response(session, fresh, created=True, warnings=a.warnings))
    return SweepCreated(sweep_id=sweep_id, created=True, runs=answers)


# ---- read -------------------------------------------------------------------------------------


def _members(session: Session, sweep_id: str) -> list[tuple[SweepRun, Run]]:
    rows = session.execute(
        select(SweepRun, Run)
        .join(Run, Run.id == SweepRun.run_id)
        .where(SweepRun.sweep_id == sweep_id)
        .order_by(SweepRun.index)
    ).all()
    return [(member, run) for member, run in rows]


def resolve(session: Session, user: users.Caller, ref: str) -> Sweep:
    """The user's sweep by full id or an unambiguous prefix."""
    ref = ref.strip()
    ref = ref if ref.startswith("s-") else "s-" + ref
    rows: list[Sweep] = []
    if SWEEP_REF.match(ref):  # ids hold no LIKE wildcards, so a valid prefix is used as is
        found = session.scalars(select(Sweep).where(Sweep.id.like(ref + "%")).limit(9)).all()
        rows = [s for s in found if users.may_see(user, s.user)]
    if len(rows) != 1:
        raise NotFound(
            f"no sweep of yours matches {ref!r}"
            if not rows
            else f"{ref!r} matches several sweeps: {', '.join(s.id for s in rows)}",
            hint="`sf sweep ls` lists your sweeps",
            details={"ref": ref},
        )
    return rows[0]


def _points(
    session: Session, run_ids: Iterable[str], key: str
) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {}
    rows = session.execute(
        select(MetricPoint.run_id, MetricPoint.step, MetricPoint.value).where(
            MetricPoint.run_id.in_(list(run_ids)), MetricPoint.key == key
        )
    ).all()
    for run_id, step, value in rows:
        out.setdefault(run_id, []).append((int(step), float(value)))
    return out


def early_stop_of(sweep: Sweep) -> EarlyStop | None:
    return EarlyStop.read(sweep.early_stop) if sweep.early_stop else None


def view(session: Session, sweep: Sweep, metric: str = "") -> SweepView:
    """The sweep with its variants, best first by the latest value of ``metric`` (default: the
    early-stopping metric), variants without a value last in grid order."""
    rule = early_stop_of(sweep)
    metric = metric or (rule.metric if rule else "")
    mode = rule.mode if rule else "min"
    members = _members(session, sweep.id)
    points = _points(session, [r.id for _, r in members], metric) if metric else {}
    variants = []
    for member, run in members:
        latest = max(points.get(run.id, []), default=None)
        variants.append(
            VariantView(
                run_id=run.id,
                index=member.index,
                params=member.params,
                status=JobStatus(run.status),
                end_reason=run.end_reason or None,
                reason=run.reason,
                metric=latest[1] if latest else None,
                step=latest[0] if latest else None,
            )
        )
    sign = 1.0 if mode == "min" else -1.0
    variants.sort(
        key=lambda v: (v.metric is None, sign * v.metric if v.metric is not None else 0, v.index)
    )
    for rank, v in enumerate(x for x in variants if x.metric is not None):
        v.rank = rank + 1
    return SweepView(
        sweep_id=sweep.id,
        user=sweep.user,
        project=sweep.project,
        experiment=sweep.experiment,
        created_at=sweep.created_at,
        grid=sweep.grid,
        early_stop=rule,
        metric=metric,
        variants=variants,
    )


def get(rt: Runtime, user: users.Caller, ref: str, metric: str = "") -> SweepView:
    with rt.transaction() as session:
        return view(session, resolve(session, user, ref), metric)


def list_sweeps(rt: Runtime, user: users.Caller, limit: int = 50) -> list[SweepView]:
    with rt.transaction() as session:
        query = select(Sweep).order_by(Sweep.created_at.desc()).limit(limit)
        if not users.sees_all(user):
            query = query.where(Sweep.user == user.name)
        return [view(session, s) for s in session.scalars(query).all()]


def runs(rt: Runtime, user: users.Caller, ref: str) -> list[RunView]:
    """The sweep's runs as ``sf job ls`` shows runs, in grid order."""
    with rt.transaction() as session:
        sweep = resolve(session, user, ref)
        ids = [r.id for _, r in _members(session, sweep.id)]
        rows = session.scalars(
            select(Run).where(Run.id.in_(ids)).options(selectinload(Run.attempts))
        ).all()
        by_id = {r.id: r for r in rows}
        return [jobs.view(rt, by_id[i], full=False) for i in ids if i in by_id]


def stop(rt: Runtime, user: users.Caller, ref: str) -> list[ActionResult]:
    """Stop every variant that has not ended (each answered like ``sf job stop``)."""
    with rt.transaction() as session:
        sweep = resolve(session, user, ref)
        ids = [
            r.id
            for _, r in _members(session, sweep.id)
            if JobStatus(r.status) in STOPPABLE_BY_SWEEP
        ]
    return [actions.stop(rt, user, run_id) for run_id in ids]


# ---- early stopping (ASHA) --------------------------------------------------------------------


def _held_by(run: Run, actor: str) -> bool:
    """Whether the sweep (``actor``) paused the run to hold it at a rung, and it still is."""
    if JobStatus(run.status) not in (JobStatus.PAUSING, JobStatus.PAUSED):
        return False
    # Who asked for the pause: the event into pausing (or into paused from the queue); the one
    # that ends a pausing attempt is the runner's.
    asked = [
        e
        for e in run.events
        if e.dst == JobStatus.PAUSING or (e.dst == JobStatus.PAUSED and e.src != JobStatus.PAUSING)
    ]
    return bool(asked) and max(asked, key=lambda e: e.id).actor == actor


@dataclass
class _Plan:
    """What one pass does to a sweep, decided and written in its transaction."""

    stops: list[tuple[Run, str]] = field(default_factory=list)  # (run, note)
    holds: list[Run] = field(default_factory=list)  # to pause (after commit: signal)
    changed: int = 0  # holds and promotions written (stops are counted apart)


def _judge(rt: Runtime, session: Session, sweep: Sweep, rule: EarlyStop) -> _Plan:
    """Decide ``sweep``'s stops, holds and promotions; write them; return what to signal."""
    members = _members(session, sweep.id)
    points = _points(session, [r.id for _, r in members], rule.metric)
    variants = [
        asha.Variant(
            run_id=run.id,
            index=member.index,
            active=member.stopped_rung is None and JobStatus(run.status) in STOPPABLE_BY_SWEEP,
            values=asha.rung_values(points.get(run.id, []), rule.rungs),
        )
        for member, run in members
    ]
    by_id = {run.id: (member, run) for member, run in members}
    decided = asha.decide(variants, rule.rungs, rule.keep, rule.mode)
    plan = _Plan()
    actor = f"sweep {sweep.id}"
    for stop in decided.stops:
        member, run = by_id[stop.run_id]
        session.refresh(run, with_for_update=True)
        if JobStatus(run.status) not in STOPPABLE_BY_SWEEP:
            continue  # it ended meanwhile
        note = asha.note(sweep.id, rule.metric, rule.keep, stop)
        member.stopped_rung, member.note = stop.rung, note
        plan.stops.append((run, note))
    held = {h.run_id for h in decided.holds}
    for hold in decided.holds:
        _, run = by_id[hold.run_id]
        session.refresh(run, with_for_update=True)
        if JobStatus(run.status) in (JobStatus.QUEUED, JobStatus.STARTING, JobStatus.RUNNING):
            note = asha.hold_note(sweep.id, rule.metric, rule.keep, hold)
            _hold_variant(session, run, actor, note, plan)
            plan.changed += 1
    for variant in variants:
        _, run = by_id[variant.run_id]
        gone = variant.run_id in held or variant.run_id in decided.out
        if gone or JobStatus(run.status) is not JobStatus.PAUSED or not _held_by(run, actor):
            continue
        rung = max(variant.values, default=rule.rungs[0])
        latest = checkpoints.latest(rt.storage.layout_of(run).out)
        start = (
            f"it continues from {latest.name} (step {latest.step})" if latest else "from the start"
        )
        reason = f"{asha.promote_note(sweep.id, rung, rule.keep)}; {start}"
        statemachine.transition(session, run, JobStatus.QUEUED, reason=reason, actor=actor)
        plan.changed += 1
    return plan


def _hold_variant(session: Session, run: Run, actor: str, note: str, plan: _Plan) -> None:
    """Pause a variant at its rung: a queued one at once, a started one through ``pausing``."""
    if JobStatus(run.status) is JobStatus.QUEUED:
        end = EndReason.PAUSED_BY_USER  # the end reason of a pause, whoever asked for it
        statemachine.transition(
            session, run, JobStatus.PAUSED, reason=note, actor=actor, end_reason=end
        )
        return
    statemachine.transition(session, run, JobStatus.PAUSING, reason=note, actor=actor)
    plan.holds.append(run)


def _stop_variant(session: Session, run: Run, sweep_id: str, note: str) -> list[str]:
    """Stop a ruled-out variant as ``sf job stop`` does, ending ``early_stopped`` with the
    sweep's note (sweep, rung, metric); the node references to signal after commit."""
    why = lifecycle.Stop(EndReason.EARLY_STOPPED, note)
    return actions.begin_stop(session, run, actor=f"sweep {sweep_id}", why=why)


def rungs_of(session: Session, run_id: str) -> list[int]:
    """The rungs of the early-stopping sweep ``run_id`` is a variant of; [] for none."""
    rule = session.scalar(
        select(Sweep.early_stop)
        .join(SweepRun, SweepRun.sweep_id == Sweep.id)
        .where(SweepRun.run_id == run_id, Sweep.early_stop.is_not(None))
    )
    return list(EarlyStop.read(rule).rungs) if rule else []


def crossed(rungs: Iterable[int], before: int | None, now: int) -> bool:
    """Whether a report that took a run's last step from ``before`` to ``now`` reached a rung."""
    return any((before is None or before < rung) and rung <= now for rung in rungs)


def judge_at_rung(rt: Runtime, run_id: str) -> int:
    """Judge the sweep of ``run_id`` now, as its job reported a rung: the job's report waits for
    this (``STARFORGE_SYNC_STEPS``), so the variant is stopped or held at the rung it reached,
    however quickly it trains on, and not passes later when the loop comes round."""
    return early_stop_pass(rt, of_run=run_id)


def early_stop_pass(rt: Runtime, *, of_run: str | None = None) -> int:
    """One ASHA pass over the sweeps with early stopping and an active variant (only the sweep
    of ``of_run`` when given); the number of variants it stopped. Stops are signalled with
    ``stop_grace_s``, holds with ``pause_grace_s`` (the training saves a checkpoint), both
    after the commit. A sweep's row is locked while it is judged: the loop's pass and a rung's
    judge never decide one sweep at once."""
    active = [s.value for s in STOPPABLE_BY_SWEEP | {JobStatus.STOPPING}]
    stop_refs: list[str] = []
    pause_refs: list[str] = []
    stopped = changed = 0
    with rt.transaction() as session:
        members = select(SweepRun.sweep_id).join(Run, Run.id == SweepRun.run_id)
        if of_run is not None:
            members = members.where(SweepRun.run_id == of_run)
        sweeps = session.scalars(
            select(Sweep)
            .where(Sweep.early_stop.is_not(None))
            .where(Sweep.id.in_(members.where(Run.status.in_(active))))
            .order_by(Sweep.id)  # one order of locks for every pass
        ).all()
        for sweep in sweeps:
            session.refresh(sweep, with_for_update=True)
            rule = early_stop_of(sweep)
            if rule is None:
                continue
            plan = _judge(rt, session, sweep, rule)
            for run, note in plan.stops:
                stop_refs += _stop_variant(session, run, sweep.id, note)
                stopped += 1
            for run in plan.holds:
                pause_refs += actions.live_refs(run.current)
            changed += plan.changed
    for ref in stop_refs:  # after commit: the decision is saved before it is acted on
        rt.executor.stop(ref, rt.settings.stop_grace_s)
    for ref in pause_refs:
        rt.executor.stop(ref, rt.settings.pause_grace_s)
    if stopped or changed:
        log.info("early stopping: %d variant(s) stopped, %d held or promoted", stopped, changed)
        rt.wake_scheduler()
    return stopped
