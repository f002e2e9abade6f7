"""Pipelines as the user sees them: each training run's steps, and each step run's place.

The steps themselves are created by :mod:`starforge.server.pipeline` (through the state
machine); this module only reads ``run_steps`` to fill :class:`~starforge.contract.api.RunView`'s
``steps`` (a run with ``--then``: every step in order, with its run and status once it exists) and
``step`` (a step run: which step of which run it is), with one query for any number of runs.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Exists, bindparam, or_, select
from sqlalchemy.orm import Session

from starforge.contract.api import RunView, StepView
from starforge.contract.states import JobStatus
from starforge.server.db.models import Run
from starforge.server.db.steps import RunStep

_IDS = bindparam("ids", expanding=True)
# Built once: every view of a run asks it.
_STEPS = (
    select(RunStep, Run.status, Run.reason)
    .join(Run, Run.id == RunStep.run_id)
    .where(or_(RunStep.root_run_id.in_(_IDS), RunStep.run_id.in_(_IDS)))
)


def attach(session: Session, rows: Sequence[Run], views: Sequence[RunView]) -> None:
    """Fill ``steps`` and ``step`` of the views of ``rows`` (in the same order)."""
    ids = [r.id for r in rows]
    if not ids:
        return
    found = session.execute(_STEPS, {"ids": ids}).all()
    by_root: dict[str, dict[int, StepView]] = {}
    by_run: dict[str, StepView] = {}
    for row, status, reason in found:
        made = StepView(
            action=row.action,
            position=row.position,
            root_run_id=row.root_run_id,
            run_id=row.run_id,
            status=JobStatus(status) if status else None,
            reason=reason,
        )
        by_root.setdefault(row.root_run_id, {})[row.position] = made
        by_run[row.run_id] = made
    for run, view in zip(rows, views, strict=True):
        view.step = by_run.get(run.id)
        actions = list((run.spec or {}).get("steps") or [])
        made_steps = by_root.get(run.id, {})
        view.steps = [
            made_steps.get(i) or StepView(action=action, position=i, root_run_id=run.id)
            for i, action in enumerate(actions)
        ]


def is_step_run() -> Exists:
    """Whether a run is a step run (a listing without ``--steps`` leaves them out): a probe of
    ``run_steps``' key per run listed, never a read of every step run."""
    return select(RunStep.run_id).where(RunStep.run_id == Run.id).exists()


def succeeded_step(session: Session, root_run_id: str, action: str) -> Run | None:
    """The step run of ``root_run_id`` doing ``action`` (``--then``), once it succeeded; e.g.
    the export whose ``out/export`` folder a later run starts from (``--init-from``)."""
    return session.scalars(
        select(Run)
        .join(RunStep, RunStep.run_id == Run.id)
        .where(
            RunStep.root_run_id == root_run_id,
            RunStep.action == action,
            Run.status == JobStatus.SUCCEEDED.value,
        )
    ).first()
