"""``sf export``: a standalone export step of a run's checkpoint, as a run of its own.

The step run is built like a pipeline's (:mod:`starforge.server.pipeline`) and goes through the
same queue, attempts and logs; it belongs to the caller and is not one of the exported run's
``--then`` steps (no ``run_steps`` row), so a run may be exported any number of times.
Refused (exit 2, nothing created): a step run, a method that declares no export, a run without
the checkpoint asked for.
"""

from __future__ import annotations

from pydantic import ValidationError
from sqlalchemy import select

from starforge.catalog.loader import get_method
from starforge.contract.api import ExportRequest, SubmitResponse
from starforge.contract.errors import Rejected
from starforge.contract.jobspec import JobSpec
from starforge.contract.states import JobStatus
from starforge.contract.steps import StepSpec
from starforge.server import pipeline, statemachine
from starforge.server.db.models import Run
from starforge.server.runtime import Runtime
from starforge.server.services.access import users
from starforge.server.services.runs import checkpoints, jobs


def _exportable(rt: Runtime, run: Run, step: int | None) -> JobSpec:
    """The run's spec, when it is a training run whose method exports and that has the
    checkpoint asked for; else a rejection naming what to do."""
    try:
        spec = JobSpec.read(run.spec)
    except ValidationError as exc:
        raise Rejected(f"run {run.id} was made by another version: {exc}") from exc
    if spec.step is not None:
        raise Rejected(
            f"run {run.id} is a {spec.step.action} step, not a training run",
            hint=f"export its training run: --checkpoint run/{spec.step.root_run_id}",
        )
    if "export" not in get_method(run.method).actions:
        raise Rejected(
            f"method {run.method} of run {run.id} declares no export",
            hint=f"`sf methods {run.method}` lists what it can do",
        )
    out = rt.storage.layout_of(run).out
    found = checkpoints.all_checkpoints(out / "checkpoints")
    if not any(step is None or c.step == step for c in found):
        have = ", ".join(str(c.step) for c in found) or "none yet"
        which = f"no checkpoint at step {step}" if step is not None else "no checkpoint"
        raise Rejected(
            f"run {run.id} has {which} (its checkpoint steps: {have})",
            hint="name one of its steps with @step=N, or wait for a checkpoint",
            details={"run_id": run.id, "steps": [c.step for c in found]},
        )
    return spec


def export(rt: Runtime, user: users.Caller, ref: str, req: ExportRequest) -> SubmitResponse:
    """Queue an export step of run ``ref``'s checkpoint as a run of its own (idempotent per
    key: the same key answers with the run it made)."""
    key = f"export:{req.idempotency_key}"
    with rt.transaction() as session:
        made = session.scalars(
            select(Run).where(Run.user == user.name, Run.idempotency_key == key)
        ).one_or_none()
        if made is not None:
            return SubmitResponse(
                run_id=made.id, status=JobStatus(made.status), created=False, message=made.reason
            )
        run = jobs.resolve(session, user, ref)
        spec = _exportable(rt, run, req.checkpoint_step)
        needs = get_method(run.method).actions["export"]
        step = StepSpec(
            action="export",
            index=0,
            actions=["export"],
            root_run_id=run.id,
            source_run_id=run.id,
            checkpoint_step=req.checkpoint_step,
            metrics=pipeline.final_metrics(session, run.id),
            data=pipeline.data_refs(spec, run.manifest),
        )
        child = pipeline.step_run(run, spec, step, needs.gpus, key=key)
        child.user = user.name  # the caller's run, whoever trained the one exported
        where = f"@step={req.checkpoint_step}" if req.checkpoint_step is not None else ""
        statemachine.admit(session, child, reason=f"export of {run.id}{where}", actor=user.name)
        response = SubmitResponse(
            run_id=child.id, status=JobStatus.QUEUED, created=True, message=child.reason
        )
    rt.wake_scheduler()
    return response
