"""Reruns (``sf job rerun``): a new run of the caller's, made from what an earlier run recorded.

:func:`plan` rebuilds the earlier run's submission from its row: the spec as it was submitted
(admission's resolution of ``--init-from`` undone), the same manifest (the same blobs: nothing is
uploaded) and auto-retry limit. Three things are pinned, so the new run gets what the old one got
rather than what is latest now: the image as admission pinned it (``IMAGE@sha256:...``), each
platform dataset at the version admission resolved for it (``OWNER/NAME@VERSION``), and an
``--init-from`` checkpoint at the step it resolved to. Then the caller's overrides, the only
changes: ``-s KEY=VALUE`` parsed by the method's declarations (as ``sf submit -s``) and
``--profile``. :func:`rerun` sends the result through the same admission, quota and idempotency as
``POST /jobs`` (:func:`jobs.submit`), which records ``rerun_of`` on the new run.

Not carried over, and said so in the answer's notes: a sweep's tag (the new run is not a variant
of that sweep) and ``--output-dataset`` (a dataset version is published once). A step run (an
export, an eval) is not rerun: its training run is, with its ``--then`` steps.

Who may rerun what: the caller must be able to read the run (:func:`jobs.resolve`: another user's
run is not found; an operator reads everyone's), and owns the new run. Its package must be blobs
the caller uploaded, as for any submission (``blobs.require_owned``), so an operator's rerun of
another user's run is refused unless the operator sent the same files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from starforge.contract import lineage, params
from starforge.contract.api import SubmitRequest
from starforge.contract.datasets import resolved_of
from starforge.contract.errors import MissingBlobs, Rejected
from starforge.contract.jobspec import InputKind, JobSpec, Manifest
from starforge.contract.lineage import ArtifactKind
from starforge.contract.reruns import KEY_PREFIX, RerunChange, RerunRequest, RerunResponse
from starforge.server.db.models import Run
from starforge.server.runtime import Runtime
from starforge.server.services.access import users
from starforge.server.services.data import blobs
from starforge.server.services.runs import admission, jobs

PINNED_IMAGE = "@sha256:"  # an image reference that names its digest


@dataclass
class Plan:
    """The submission a rerun makes, and how it differs from the run it reruns."""

    request: SubmitRequest
    changes: list[RerunChange] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _stored(run: Run) -> JobSpec:
    """The run's spec as submitted, or a rejection saying how to make the run again."""
    try:
        return JobSpec.read(lineage.as_submitted(run.spec))
    except ValidationError as exc:
        raise Rejected(
            f"run {run.id} cannot be rerun: its recorded spec does not read as a submission "
            f"({exc.error_count()} problem(s), first: {exc.errors()[0]['msg']})",
            hint="check out its commit and submit it again (`sf job status` shows the commit)",
            details={"run_id": run.id},
        ) from exc


def _refuse_step(run: Run, spec: JobSpec) -> None:
    if spec.step is not None:
        root = spec.step.root_run_id
        raise Rejected(
            f"run {run.id} is the {spec.step.action} step of run {root}, not a training run",
            hint=f"rerun the training run with its steps: sf job rerun {root}",
            details={"run_id": run.id, "root_run_id": root},
        )


def _overrides(spec: JobSpec, req: RerunRequest) -> tuple[dict[str, Any], list[RerunChange]]:
    """The hyperparameters with ``-s`` applied (typed by the server's catalog), and what changed.

    The catalog handshake runs first: a run whose method the server no longer has at its
    recorded version cannot be rerun exactly, and says so (a stale lock)."""
    method, _ = admission.check_catalog(spec)
    given = params.parse_sets(method.params, req.sets)
    changes = [
        RerunChange(key=key, old=spec.hyperparams.get(key), new=value)
        for key, value in given.items()
        if key not in spec.hyperparams or spec.hyperparams[key] != value
    ]
    return {**spec.hyperparams, **given}, changes


def _pin_datasets(run: Run, spec: JobSpec, notes: list[str]) -> dict[str, Any]:
    """The inputs with every platform dataset at the version the run read."""
    inputs = spec.inputs.model_dump(mode="json")
    for key, resolved in resolved_of(run.config).items():
        ref = getattr(spec.inputs, key, None)
        if ref is None or ref.kind is not InputKind.DATASET:
            continue
        if ref.dataset != resolved.ref:
            notes.append(f"{key}: {ref.dataset} pinned to {resolved.ref}, the version the run read")
        inputs[key] = ref.model_copy(update={"dataset": resolved.ref}).model_dump(mode="json")
    return inputs


def _pin_image(run: Run, spec: JobSpec, notes: list[str]) -> str:
    """The image as admission pinned it, where it pinned a digest (else as submitted)."""
    if PINNED_IMAGE not in run.image or spec.image == run.image:
        return spec.image
    notes.append(f"image: {spec.image or 'the default'} pinned to {run.image}, what the run ran")
    return run.image


def _pin_init_from(run: Run, spec: JobSpec) -> dict[str, Any] | None:
    """``--init-from`` at the checkpoint step it resolved to (``latest`` may have moved on)."""
    if spec.init_from is None:
        return None
    pinned = spec.init_from.model_dump(mode="json")
    resolved = (run.spec.get("init_from") or {}).get("resolved_step")
    if spec.init_from.kind is ArtifactKind.CHECKPOINT and spec.init_from.step is None:
        pinned["step"] = resolved
    return pinned


def plan(run: Run, req: RerunRequest) -> Plan:
    """The submission that reruns ``run`` with ``req``'s overrides (no I/O but the catalog)."""
    spec = _stored(run)
    _refuse_step(run, spec)
    hyperparams, changes = _overrides(spec, req)
    notes: list[str] = []
    data = spec.model_dump(mode="json")
    data.update(
        hyperparams=hyperparams,
        inputs=_pin_datasets(run, spec, notes),
        image=_pin_image(run, spec, notes),
        init_from=_pin_init_from(run, spec),
    )
    if req.profiles is not None and req.profiles != spec.profiles:
        changes.append(RerunChange(key="profile", old=spec.profiles, new=req.profiles))
        data["profiles"] = req.profiles
    if spec.sweep is not None:
        data.pop("sweep")
        notes.append(f"not a variant of sweep {spec.sweep.id}: a rerun is a run of its own")
    if spec.output_dataset:
        data.pop("output_dataset")
        notes.append(
            f"--output-dataset {spec.output_dataset} not carried over: a dataset version is "
            "published once"
        )
    request = SubmitRequest(
        spec=JobSpec.model_validate({k: v for k, v in data.items() if v is not None}),
        manifest=Manifest.read(run.manifest),
        idempotency_key=KEY_PREFIX + req.idempotency_key,
        max_retries=run.max_retries,
    )
    return Plan(request=request, changes=changes, notes=notes)


def _require_package(rt: Runtime, user: users.Caller, run: Run, manifest: Manifest) -> None:
    """The recorded package is on the server and the caller's own upload; else say why not
    (before admission reads a blob: nothing is said about another user's files)."""
    lacking = blobs.missing(rt, user.name, manifest.digests())
    if not lacking:
        return
    commit = str((run.spec.get("provenance") or {}).get("git_commit", ""))[:12]
    if run.user != user.name:
        raise Rejected(
            f"run {run.id} is {run.user}'s: its package was uploaded by {run.user}, and a rerun "
            "uses only files you uploaded",
            hint=f"ask {run.user} to rerun it, or check out commit {commit} and `sf submit` it",
            details={"run_id": run.id, "owner": run.user},
        )
    raise MissingBlobs(
        f"{len(lacking)} file(s) of run {run.id}'s package are no longer on the server",
        hint=f"check out its commit {commit} and submit it again with `sf submit`",
        details={"run_id": run.id, "missing": lacking[:1000]},
    )


def rerun(rt: Runtime, user: users.Caller, ref: str, req: RerunRequest) -> RerunResponse:
    """Admit and queue a rerun of run ``ref`` (idempotent per key, like ``POST /jobs``)."""
    with rt.reading() as session:
        run = jobs.resolve(session, user, ref)
        made = plan(run, req)
    _require_package(rt, user, run, made.request.manifest)  # its fields were read above
    source = run.id
    answer = jobs.submit(rt, user.name, made.request, rerun_of=source)
    sizes = {f.sha256: f.size for f in made.request.manifest.files}  # as `sf submit` counts
    return RerunResponse(
        **answer.model_dump(),
        rerun_of=source,
        changes=made.changes,
        notes=made.notes,
        package_files=len(sizes),
        package_bytes=sum(sizes.values()),
    )
