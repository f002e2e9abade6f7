"""Runs as the user sees them: submit, list, get (by id or prefix); user actions (stop, pause,
resume, retry) live in ``services/runs/actions``, which reads runs through this module.

Submit is idempotent per (user, idempotency key): the first request creates the run, any later
one with the same body returns that run with ``created=False``, and one with a different body
is a 409 naming the run. The unique constraint on the pair makes this hold even when two requests
race (the loser reads the winner's run).
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy import ColumnElement, Connection, bindparam, func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload

from starforge.catalog.loader import Method
from starforge.contract import lineage
from starforge.contract.api import (
    AttemptView,
    EventView,
    Quota,
    RunList,
    RunView,
    SubmitRequest,
    SubmitResponse,
)
from starforge.contract.datasets import resolved_of
from starforge.contract.errors import AmbiguousRun, IdempotencyConflict, RunNotFound
from starforge.contract.jobspec import JobSpec
from starforge.contract.names import new_run_id
from starforge.contract.states import EndReason, JobStatus
from starforge.server import statemachine
from starforge.server.db.engine import read_only
from starforge.server.db.models import Attempt, Run, utcnow
from starforge.server.executors.base import SupportsCheckPools, SupportsPendingReason
from starforge.server.runtime import Runtime
from starforge.server.services.access import isolation, secrets, users
from starforge.server.services.data import blobs, datasets, images, registries
from starforge.server.services.data.images import AdmittedImage
from starforge.server.services.runs import admission, lifecycle
from starforge.server.services.runs import lineage as run_lineage
from starforge.server.services.scheduling import accounting, queue, quotas
from starforge.server.services.workflows import gates, pipelines
from starforge.server.storage import Storage

log = logging.getLogger(__name__)
MAX_CANDIDATES = 8


# ---- submit -----------------------------------------------------------------------------------


_BY_KEY = select(Run).where(Run.user == bindparam("user"), Run.idempotency_key == bindparam("key"))
_RUNS = Run.__table__.c
# A submit's reads of the database but its package's blobs, as one statement (no FROM): the run
# an earlier request with its key made (almost always none), what the isolation rule judges of
# the submitter, and the submitter's own quota.
_SUBMITTER = select(
    select(_RUNS.id)
    .where(_RUNS.user == bindparam("user"), _RUNS.idempotency_key == bindparam("key"))
    .scalar_subquery()
    .label("existing"),
    *isolation.STANDING,
    *quotas.OWN,
)


def _find_by_key(session: Session, user: str, key: str) -> Run | None:
    return session.scalars(_BY_KEY, {"user": user, "key": key}).one_or_none()


def queue_position(session: Session | Connection, run: Run) -> int | None:
    """1-based place of a queued run by priority then age, None when it is not queued.

    One COUNT, so a submit costs the same with 10 or 10,000 runs queued. The scheduler also
    shares GPUs fairly between users: a run's view (``sf job status``) has its live place.
    """
    if run.status != JobStatus.QUEUED:
        return None
    return queue.priority_position(session, run)


def submit_response(
    session: Session | Connection, run: Run, *, created: bool, warnings: list[str]
) -> SubmitResponse:
    message = run.reason
    if not created:
        message = f"an earlier request with this idempotency key created it; {message}"
    return SubmitResponse(
        run_id=run.id,
        status=JobStatus(run.status),
        created=created,
        message=message,
        warnings=warnings,
        queue_position=queue_position(session, run),
    )


def _same_request(run: Run, req: SubmitRequest) -> bool:
    """Whether ``req`` is the request that made ``run`` (a retry), not a new one reusing its key."""
    return (
        lineage.as_submitted(run.spec) == req.spec.model_dump(mode="json")
        and run.manifest == req.manifest.model_dump(mode="json")
        and run.max_retries == req.max_retries
    )


def _replay(session: Session, run: Run, req: SubmitRequest) -> SubmitResponse:
    """The answer to a request whose key made ``run`` already: that run, or a 409 if it differs."""
    if not _same_request(run, req):
        raise IdempotencyConflict(
            f"the idempotency key {req.idempotency_key!r} was used for run {run.id}, "
            "with a different spec or manifest",
            hint=f"use a new key for a new submission (`sf job status {run.id}` shows that run)",
            details={"run_id": run.id, "idempotency_key": req.idempotency_key},
        )
    return submit_response(session, run, created=False, warnings=[])


def new_run(user: str, req: SubmitRequest, admitted: admission.Admitted) -> Run:
    run = _run_row(user, req, admitted)
    run_lineage.record(run, admitted.init_from)  # where it starts from, kept in its spec
    return run


def _run_row(user: str, req: SubmitRequest, admitted: admission.Admitted) -> Run:
    spec = req.spec
    return Run(
        id=new_run_id(),
        user=user,
        project=spec.project,
        experiment=spec.experiment,
        method=spec.method.id,
        status="",
        priority=0,
        spec=spec.model_dump(mode="json"),
        manifest=req.manifest.model_dump(mode="json"),
        pools=[p.model_dump(mode="json") for p in admitted.pools],
        config=admitted.config,
        gpus=admitted.gpus,
        image=admitted.image,
        image_source=admitted.image_source,
        idempotency_key=req.idempotency_key,
        current_attempt=0,
        max_retries=req.max_retries,
    )


@dataclass(frozen=True)
class AdmissionContext:
    """What admission reads from the database once per request (a sweep shares one)."""

    limits: Quota
    image_check: Callable[[JobSpec, Method], AdmittedImage]


def admission_context(rt: Runtime, session: Session | Connection, user: str) -> AdmissionContext:
    limits, _ = quotas.effective(session, rt.settings, user)
    return _context(rt, session, limits)


def _context(rt: Runtime, session: Session | Connection, limits: Quota) -> AdmissionContext:
    defaults, entries = images.admission_tables(session, rt.settings)
    image_check = functools.partial(
        images.admit_image,
        settings=rt.settings,
        defaults=defaults,
        entries=entries,
        login=functools.partial(registries.login_for, rt),
    )
    return AdmissionContext(limits, image_check)


def admit_request(
    rt: Runtime,
    user: str,
    req: SubmitRequest,
    context: AdmissionContext,
    storage: Storage | None = None,
) -> admission.Admitted:
    """Every admission check of one submission (``POST /jobs`` and each variant of a sweep).
    ``storage``: the store with the package's blobs looked up once (:meth:`Storage.pinned`)."""
    return admission.admit(
        req.spec,
        req.manifest,
        profiles=rt.settings.profiles,
        inventory=rt.inventory,
        storage=storage or rt.storage,
        quota=context.limits,
        shared_roots=rt.settings.shared_roots,
        executor_check=(
            rt.executor.check_pools if isinstance(rt.executor, SupportsCheckPools) else None
        ),
        image_check=context.image_check,
        secrets_check=functools.partial(secrets.admit_secrets, rt, user),
        init_from_check=functools.partial(run_lineage.resolve, rt, user),
        dataset_check=functools.partial(datasets.admit, rt, user),
    )


def submit(rt: Runtime, user: str, req: SubmitRequest, *, rerun_of: str = "") -> SubmitResponse:
    """Admit and queue a submission, or return the run an earlier one with its key made;
    ``rerun_of``: the run it reruns (``services/runs/reruns``), recorded on the new run.

    Two transactions of three statements each, on bare connections (no session, no unit of
    work): one read (a snapshot that takes no write lock on SQLite) of everything admission needs
    (:data:`_SUBMITTER`, the image tables, the package's blobs), and one write of the run and its
    event that answers with the run's place. The committed row is the durable record; the run's
    files are written when it is placed."""
    digests = req.manifest.digests()
    with read_only(rt.engine) as conn:
        found = conn.execute(_SUBMITTER, {"user": user, "key": req.idempotency_key}).one()
        if found.existing is not None:
            with Session(bind=conn) as session:
                existing = _find_by_key(session, user, req.idempotency_key)
                assert existing is not None  # the same snapshot
                return _replay(session, existing, req)
        isolation.require_separation(rt, conn, user, isolation.Standing.of(found))
        context = _context(rt, conn, quotas.of_own(rt.settings, found))
        have, extents = blobs.owned_at(conn, user, digests)
    storage = rt.storage.pinned(digests, extents)
    # Ownership first: admission reads blobs (the sensitive-content check, the config), and what
    # it says of one must never be about another user's upload.
    if set(digests) - have or storage.missing(digests):
        blobs.require_owned(rt, user, digests)  # never another user's uploads: names them
    admitted = admit_request(rt, user, req, context, storage)
    limits = context.limits
    run = new_run(user, req, admitted)
    run.priority = limits.priority  # the queue orders by the user's priority at submit
    if rerun_of:
        run.rerun_of = rerun_of
    try:
        # A request's transaction, never a leader's pass: nothing to fence (rt.transaction).
        with rt.engine.begin() as conn:
            # A racing request with the same key fails here, before the answer.
            statemachine.admit_now(conn, run, reason="waiting for the scheduler", actor=user)
            # The COUNT sees the two INSERTs admit_now wrote.
            response = submit_response(conn, run, created=True, warnings=admitted.warnings)
    except IntegrityError:  # the same key committed meanwhile: answer with that run
        with rt.transaction() as session:
            existing = _find_by_key(session, user, req.idempotency_key)
            if existing is None:
                raise
            return _replay(session, existing, req)
    rt.wake_scheduler(arrival=True)  # after the commit: the pass must see the run
    return response


# ---- read -------------------------------------------------------------------------------------


def resolve(session: Session, user: users.Caller, ref: str) -> Run:
    """The user's run named by a full id or an unambiguous prefix (with or without ``r-``)."""
    ref = ref.strip()
    if not ref:
        raise RunNotFound("no run id given", hint="`sf job ls` lists your runs")
    prefix = ref if ref.startswith("r-") or "r-".startswith(ref) else "r-" + ref
    run = session.get(Run, prefix)
    if run is not None and users.may_see(user, run.user):  # another's run: as if absent
        return run
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    rows = session.scalars(
        select(Run)
        .where(users.visible_runs(user), Run.id.like(escaped + "%", escape="\\"))
        .order_by(Run.created_at.desc())
        .limit(MAX_CANDIDATES + 1)
    ).all()
    if not rows:
        raise RunNotFound(
            f"no run of yours matches {ref!r}",
            hint="`sf job ls` lists your runs",
            details={"ref": ref},
        )
    if len(rows) > 1:
        shown = [r.id for r in rows[:MAX_CANDIDATES]]
        more = " ..." if len(rows) > MAX_CANDIDATES else ""
        raise AmbiguousRun(
            f"{ref!r} matches several runs: {', '.join(shown)}{more}",
            hint="give more characters of the run id",
            details={"ref": ref, "candidates": shown},
        )
    return rows[0]


def _attempt_view(rt: Runtime, a: Attempt, cost: accounting.Cost) -> AttemptView:
    found = AttemptView.model_validate(a, from_attributes=True)  # the row's own fields
    found.gpus, found.gpu_hours, found.cost = cost.gpus, cost.gpu_hours, cost.cost
    found.currency = accounting.currency_of(rt.settings, cost.cost)
    return found


def stored_spec(run: Run) -> tuple[dict[str, Any], JobSpec | None]:
    """The stored spec as data, and as a JobSpec when it still validates (lenient read)."""
    data = run.spec
    try:
        return data, JobSpec.read(data)  # stored data: a newer server may have added fields
    except ValidationError:
        return data, None


def view(rt: Runtime, run: Run, *, full: bool = True) -> RunView:
    data, spec = stored_spec(run)
    provenance = data.get("provenance") or {}
    run_dir = rt.storage.layout_of(run).dir
    costs, total = accounting.run_costs(rt.settings, run, utcnow())
    return RunView(
        run_id=run.id,
        user=run.user,
        project=run.project,
        experiment=run.experiment,
        method=run.method,
        status=JobStatus(run.status),
        end_reason=EndReason(run.end_reason) if run.end_reason else None,
        exit_code=run.exit_code,
        reason=run.reason,
        profiles=list(data.get("profiles") or []),
        pools=admission.run_pools(run),
        gpus=run.gpus,
        image=run.image,
        image_source=run.image_source,
        git_commit=str(provenance.get("git_commit", "")),
        git_dirty=bool(provenance.get("git_dirty", False)),
        rerun_of=run.rerun_of or "",
        created_at=run.created_at,
        started_at=run.started_at,
        ended_at=run.ended_at,
        run_dir=str(run_dir),
        attempts=[_attempt_view(rt, a, c) for a, c in zip(run.attempts, costs, strict=True)],
        events=[
            EventView(
                at=e.at,
                src=JobStatus(e.src) if e.src else None,
                dst=JobStatus(e.dst),
                reason=e.reason,
                actor=e.actor,
            )
            for e in run.events
        ]
        if full
        else [],
        spec=spec if full else None,
        auto_retries=run.auto_retries or 0,
        max_retries=lifecycle.retry_limit(run),
        executor_pending=_executor_pending(rt, run),
        datasets={key: r.ref for key, r in resolved_of(run.config).items()},
        gpu_hours=total.gpu_hours,
        cost=total.cost,
        currency=accounting.currency_of(rt.settings, total.cost),
    )


def _executor_pending(rt: Runtime, run: Run) -> str:
    """Why the executor has not started a placed run yet (Slurm: its pending reason)."""
    attempt = run.attempt(run.current_attempt) if run.status == JobStatus.STARTING else None
    if (
        attempt is None
        or not attempt.executor_ref
        or not isinstance(rt.executor, SupportsPendingReason)
    ):
        return ""
    return rt.executor.pending_reason(attempt.executor_ref.split(",")[0]) or ""


def get(rt: Runtime, user: users.Caller, ref: str) -> RunView:
    """A run's view; a queued run's place and why it waits come from the scheduler's latest pass
    (:func:`starforge.server.services.scheduling.queue.explain`), never from a plan of its own."""
    with rt.reading() as session:
        run = resolve(session, user, ref)
        found = view(rt, run)
        queue.explain(rt, session, [(run, found)])
        pipelines.attach(session, [run], [found])
        gates.attach(rt, run, found)
        hide_others(session, user, [found])
    return found


RUN_ID_IN_TEXT = re.compile(r"\br-[0-9a-z]{10}\b")
OTHERS_RUN = "another user's run"


def hide_others(session: Session, user: users.Caller, views: list[RunView]) -> None:
    """Replace the ids of other users' runs in why-waiting texts (a reservation kept for a run,
    the runs holding a node's GPUs) for a caller who may not see them: their ids are not leaked,
    the numbers stay."""
    if users.sees_all(user):
        return
    texts = [t for v in views for t in _why_texts(v)]
    named = {m for t in texts for m in RUN_ID_IN_TEXT.findall(t)}
    if not named:
        return
    others = _others(session, user, named)
    if not others:
        return

    def hide(text: str) -> str:
        return _hide(text, others)

    for v in views:
        v.reason = hide(v.reason)
        for e in v.events:
            e.reason = hide(e.reason)
        p = v.pending
        if p is not None:
            p.message, p.detail, p.next_event = hide(p.message), hide(p.detail), hide(p.next_event)
            p.blocking_runs = [OTHERS_RUN if r in others else r for r in p.blocking_runs]


def hide_others_in(rt: Runtime, user: users.Caller, text: str) -> str:
    """``text`` with the ids of runs ``user`` may not see replaced (see :func:`hide_others`)."""
    if users.sees_all(user) or not RUN_ID_IN_TEXT.search(text):
        return text
    with rt.reading() as session:
        others = _others(session, user, set(RUN_ID_IN_TEXT.findall(text)))
    return _hide(text, others)


_OTHERS = select(Run.id).where(
    Run.id.in_(bindparam("named", expanding=True)), Run.user != bindparam("user")
)


def _others(session: Session, user: users.Caller, named: set[str]) -> set[str]:
    return set(session.scalars(_OTHERS, {"named": sorted(named), "user": user.name}).all())


def _hide(text: str, others: set[str]) -> str:
    return RUN_ID_IN_TEXT.sub(lambda m: OTHERS_RUN if m[0] in others else m[0], text)


def _why_texts(v: RunView) -> list[str]:
    texts = [v.reason, *(e.reason for e in v.events)]
    if v.pending is not None:
        p = v.pending
        texts += [p.message, p.detail, p.next_event, *p.blocking_runs]
    return texts


# A listing's order, newest first; an index per filter serves it in this order (migration 0026:
# a user's own runs, with a status, everyone's, with a status, a project's), so a page reads its
# ``limit`` rows and never the history behind them.
_NEWEST_FIRST = (Run.created_at.desc(), Run.id.desc())


def page(
    rt: Runtime,
    user: users.Caller,
    *,
    limit: int = 50,
    status: JobStatus | None = None,
    hide_steps: bool = False,
    before: str | None = None,
    project: str | None = None,
) -> RunList:
    """One page of the runs ``user`` may see (of ``project`` when given), newest first;
    ``before`` (the ``next_before`` of the previous page: a run id) starts it after that run in
    this order (keyset pagination: a run submitted between two pages never shifts the second, and
    the pages never overlap). ``next_before`` is set when an older run exists."""
    with rt.reading() as session:
        query = select(Run).where(users.visible_runs(user)).options(selectinload(Run.attempts))
        if status is not None:
            query = query.where(Run.status == status.value)
        if project is not None:
            query = query.where(Run.project == project)
        if hide_steps:  # a pipeline is one row; `sf job ls --steps` shows its step runs too
            query = query.where(~pipelines.is_step_run())
        if before is not None:
            query = query.where(*_older_than(session, user, before))
        rows = list(session.scalars(query.order_by(*_NEWEST_FIRST).limit(limit + 1)).all())
        more = len(rows) > limit
        rows = rows[:limit]
        views = [view(rt, r, full=False) for r in rows]
        queue.explain(rt, session, list(zip(rows, views, strict=True)))
        pipelines.attach(session, rows, views)
        hide_others(session, user, views)
    return RunList(runs=views, next_before=rows[-1].id if more and rows else None)


def _older_than(session: Session, user: users.Caller, run_id: str) -> list[ColumnElement[bool]]:
    """The keyset condition "after ``run_id`` in newest-first order"; the range bound on
    ``created_at`` alone lets either database seek the index to it."""
    cursor = session.execute(
        select(Run.created_at, Run.id).where(Run.id == run_id, users.visible_runs(user))
    ).first()
    if cursor is None:
        raise RunNotFound(
            f"no run {run_id!r} to list from",
            hint="give --before the run id a previous page ended with (its next_before)",
        )
    at, rid = cursor
    return [Run.created_at <= at, or_(Run.created_at < at, Run.id < rid)]


def count_runs(rt: Runtime, user: str) -> int:
    with rt.reading() as session:
        return int(session.scalar(select(func.count()).where(Run.user == user)) or 0)
