"""The next step of a pipeline, built when a run succeeds (``sf submit --then export --then eval``).

:func:`next_step` is called by :mod:`starforge.server.statemachine` inside the transaction that
writes ``succeeded``; it returns the step run to admit and its ``run_steps`` row, or None when the
pipeline has no further step. Nothing here writes a status (the state machine admits the run), so
the step is created with the success or not at all: a control-plane crash before the commit
leaves neither, a crash after it leaves both, and the unique (root, position) row refuses a
second copy. The step run is an ordinary run: same user, experiment, package, config and image
as the training run, pools shaped by what the method declares for the action (GPUs on one node
of the training run's first pool's series), its own attempts and log. Its JobSpec carries a
:class:`~starforge.contract.steps.StepSpec` with the provenance a job cannot read itself (the
training run's final metrics, its data's digests).
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import ValidationError
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from starforge.catalog.loader import get_method
from starforge.contract.errors import StarForgeError
from starforge.contract.jobspec import InputKind, JobSpec
from starforge.contract.names import new_run_id
from starforge.contract.profiles import Pool
from starforge.contract.steps import DataRef, StepSpec
from starforge.server.db.metrics import MetricPoint
from starforge.server.db.models import Run
from starforge.server.db.steps import RunStep


def final_metrics(session: Session, run_id: str) -> dict[str, float]:
    """Each metric key's value at its highest logged step (what the model card records)."""
    last = (
        select(MetricPoint.key, func.max(MetricPoint.step).label("step"))
        .where(MetricPoint.run_id == run_id)
        .group_by(MetricPoint.key)
        .subquery()
    )
    rows = session.execute(
        select(MetricPoint.key, MetricPoint.value)
        .join(
            last,
            (MetricPoint.key == last.c.key) & (MetricPoint.step == last.c.step),
        )
        .where(MetricPoint.run_id == run_id)
    ).all()
    # An infinite (or NaN) final value has no JSON spelling: PostgreSQL would refuse the whole
    # success. Such a metric is left out of the card.
    return {key: float(value) for key, value in sorted(rows) if math.isfinite(value)}


def data_refs(spec: JobSpec, manifest: dict[str, Any]) -> list[DataRef]:
    """The run's data inputs, with the package file's sha256 where the data travelled with it."""
    digests = {f.get("path"): f.get("sha256", "") for f in manifest.get("files") or []}
    refs = []
    for name in ("train_data", "validation_data"):
        ref = getattr(spec.inputs, name)
        if ref is None:
            continue
        sha = str(digests.get(ref.value, "")) if ref.kind is InputKind.PACKAGE else ""
        refs.append(DataRef(name=name, kind=ref.kind.value, value=ref.value, sha256=sha))
    return refs


def step_pools(run: Run, gpus: int) -> list[Pool]:
    """One node of the training run's first pool's series, with ``gpus`` GPUs."""
    first = Pool.read(run.pools[0])
    return [
        Pool(
            name="all",
            profile=first.profile,
            series=first.series,
            nodes=1,
            gpus_per_node=gpus,
            roles=list(first.roles),
            env=dict(first.env),
        )
    ]


def step_run(parent: Run, spec: JobSpec, step: StepSpec, gpus: int, key: str) -> Run:
    """A step run of ``parent`` (same user, experiment, package, config, image)."""
    child_spec = spec.model_copy(update={"steps": [], "step": step})
    pools = step_pools(parent, gpus)
    return Run(
        id=new_run_id(),
        user=parent.user,
        project=parent.project,
        experiment=parent.experiment,
        method=parent.method,
        status="",
        priority=parent.priority,
        spec=child_spec.model_dump(mode="json"),
        manifest=parent.manifest,
        pools=[p.model_dump(mode="json") for p in pools],
        config=parent.config,
        gpus=sum(p.total_gpus for p in pools),
        image=parent.image,
        image_source=parent.image_source,
        idempotency_key=key,
        current_attempt=0,
        max_retries=parent.max_retries,
    )


def _source(session: Session, run: Run, root: str, actions: list[str], index: int) -> str:
    """Whose output the step at ``index`` reads: the export's for a step after an export."""
    if actions[index] == "export" or "export" not in actions[:index]:
        return root
    position = actions.index("export")
    found = session.scalar(
        select(RunStep.run_id).where(RunStep.root_run_id == root, RunStep.position == position)
    )
    return found or run.id


def next_step(session: Session, run: Run) -> tuple[Run, RunStep] | str | None:
    """The step to start now that ``run`` succeeded: (run, row); a text saying why the
    pipeline stops short; or None when there is no further step.

    Never raises for a run it cannot make a step of: the success it is called from must be
    recorded whatever the step's fate (the run's reason then says why the pipeline stopped)."""
    try:
        return _next_step(session, run)
    except (ValidationError, StarForgeError, ValueError, KeyError, IndexError) as exc:
        return f"next step not started: {exc}"


def _next_step(session: Session, run: Run) -> tuple[Run, RunStep] | str | None:
    try:
        spec = JobSpec.read(run.spec)
    except ValidationError:
        return None
    current = spec.step
    actions = list(current.actions if current else spec.steps)
    index = current.index + 1 if current else 0
    if index >= len(actions) or not run.pools:
        return None
    root = current.root_run_id if current else run.id
    action = actions[index]
    if session.scalar(  # made by an earlier success of this run: a step is made once
        select(RunStep.run_id).where(RunStep.root_run_id == root, RunStep.position == index)
    ):
        return None
    try:
        needs = get_method(run.method).actions.get(action)
    except StarForgeError:
        needs = None
    if needs is None:
        return f"step {action} not started: {run.method} no longer declares it"
    step = StepSpec(
        action=action,
        index=index,
        actions=actions,
        root_run_id=root,
        source_run_id=_source(session, run, root, actions, index),
        metrics=current.metrics if current else final_metrics(session, run.id),
        data=current.data if current else data_refs(spec, run.manifest),
    )
    if current is not None:  # the step runs from the training run's spec, not the step's own
        spec = spec.model_copy(update={"step": None})
    child = step_run(run, spec, step, needs.gpus, key=f"step:{root}:{index}")
    return child, RunStep(run_id=child.id, root_run_id=root, position=index, action=action)
