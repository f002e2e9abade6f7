"""``--init-from``: admission's lookup of the parent run and its artifact.

:func:`resolve` answers, for a submission that names ``run/RUN_ID/KIND[@step=N]``: the parent is
a run of *this* user (another user's run, even one an admin may see, reads as absent: starting
from it would copy their weights), its method is compatible (``contract.lineage``), and the
artifact exists now. A checkpoint is one of the parent's complete checkpoints
(``services.runs.checkpoints``), step N or the latest. An export is the Hugging Face folder
(``out/export`` with a ``config.json``) of the parent itself when it is an export step run, else
of the newest succeeded export step run of the parent (``sf submit --then export``, ``sf
export``). The answer is the :class:`InitFrom` with ``path``, ``resolved_step`` and
``parent_method`` filled in; :func:`record` writes it into the run's stored spec, so the run
keeps where it started from and its job gets that path as its model (``contract.env``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from starforge.contract.errors import Rejected
from starforge.contract.jobspec import JobSpec
from starforge.contract.lineage import EXPORT_DIR, ArtifactKind, InitFrom, check_compatible
from starforge.server.db.models import Run
from starforge.server.services.runs import checkpoints

if TYPE_CHECKING:
    from starforge.server.runtime import Runtime

HF_CONFIG = "config.json"  # what makes a folder a Hugging Face model folder


def _reject(init: InitFrom, what: str, hint: str, **details: Any) -> Rejected:
    return Rejected(
        f"--init-from {init.ref}: {what}", hint=hint, details={"init_from": init.ref, **details}
    )


def _out(rt: Runtime, run: Run) -> Path:
    return rt.storage.layout_of(run).out


def _step_of(run: Run) -> dict[str, Any]:
    step = (run.spec or {}).get("step")
    return step if isinstance(step, dict) else {}


def _checkpoint(rt: Runtime, parent: Run, init: InitFrom) -> tuple[str, int]:
    found = checkpoints.all_checkpoints(_out(rt, parent))
    if init.step is not None:
        found = [c for c in found if c.step == init.step]
    if not found:
        steps = [c.step for c in checkpoints.all_checkpoints(_out(rt, parent))]
        what = f"run {parent.id} has no complete checkpoint" + (
            f" at step {init.step} (it has steps {', '.join(map(str, steps))})"
            if init.step is not None and steps
            else ""
        )
        hint = (
            f"pick one of its steps, e.g. --init-from run/{parent.id}/checkpoint@step={steps[-1]}"
            if steps
            else f"wait for the run to save a checkpoint (`sf job status {parent.id}`)"
        )
        raise _reject(init, what, hint, steps=steps)
    return str(found[-1].path), found[-1].step


def _export(rt: Runtime, session: Any, parent: Run, init: InitFrom) -> str:
    own = _out(rt, parent) / EXPORT_DIR
    if (own / HF_CONFIG).is_file():
        return str(own)
    siblings = session.scalars(
        select(Run)
        .where(Run.user == parent.user, Run.project == parent.project)
        .where(Run.experiment == parent.experiment, Run.status == "succeeded")
        .order_by(Run.created_at.desc())
    ).all()
    for run in siblings:
        step = _step_of(run)
        if step.get("action") == "export" and parent.id in {
            step.get("root_run_id"),
            step.get("source_run_id"),
        }:
            folder = _out(rt, run) / EXPORT_DIR
            if (folder / HF_CONFIG).is_file():
                return str(folder)
    raise _reject(
        init,
        f"run {parent.id} has no export (no Hugging Face folder with {HF_CONFIG})",
        f"export it first (`sf export {parent.experiment} --checkpoint run/{parent.id}` or "
        f"`sf submit ... --then export`), or start from --init-from run/{parent.id}/checkpoint",
    )


def resolve(rt: Runtime, user: str, spec: JobSpec) -> InitFrom | None:
    """The submission's ``--init-from`` resolved, or None without one; :class:`Rejected` (exit 2)
    names a missing run, a run of another user, a missing artifact or step, or an incompatible
    method."""
    init = spec.init_from
    if init is None:
        return None
    if init.path or init.resolved_step is not None or init.parent_method:
        raise _reject(init, "path, resolved_step and parent_method are the server's to fill", "")
    with rt.transaction() as session:
        parent = session.get(Run, init.run_id)
        if parent is None or parent.user != user:  # another user's run: as if absent
            raise _reject(
                init,
                f"no run {init.run_id} of yours",
                "`sf job ls` lists your runs; give the parent's full run id",
            )
        check_compatible(parent.method, spec.method.id, init)
        if init.kind is ArtifactKind.CHECKPOINT:
            path, step = _checkpoint(rt, parent, init)
            return init.model_copy(
                update={"path": path, "resolved_step": step, "parent_method": parent.method}
            )
        path = _export(rt, session, parent, init)
        return init.model_copy(
            update={"path": path, "resolved_step": None, "parent_method": parent.method}
        )


def record(run: Run, resolved: InitFrom | None) -> None:
    """Write the resolved lineage into the run's stored spec (before the run is committed)."""
    if resolved is not None:
        run.spec = {**run.spec, "init_from": resolved.model_dump(mode="json")}
