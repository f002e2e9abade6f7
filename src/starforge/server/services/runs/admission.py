"""Admission: every check a submission must pass before anything is created.

:func:`admit` is pure with respect to the database (it reads settings, the catalog, the storage and
the disk) and returns what the run will be; it raises a :mod:`starforge.contract.errors` class
naming what was wrong and what to do. Order: catalog handshake (the submission's lock against the
server's catalog), the checks the CLI ran too (:func:`contract.submission.check_submission`: profile
against roles, required inputs, the image, the entrypoint, the recorded parameters), profiles
resolved once (the profile's env snapshotted into the pools), fit against the inventory, shared
(absolute) inputs under a configured shared root and then on disk, package inputs in the manifest,
blobs present, and the experiment's config composed once for the observability rule and the
framework checks (the client's validation is not trusted). The composed config is returned for the
run's ``run.json``, so the runner does not compose it again. Capacity that is merely busy is not
checked here: the run queues. Nor is a quota that is merely in use by the user's other runs (the run
queues); a quota that can never allow the run (a profile it excludes, more GPUs than its limits) is
rejected with the numbers, right after the fit.

Admission reads the package's blobs (the sensitive-content check first, then the config), so its
callers (``jobs.submit``, ``sweeps``) check that every blob of the manifest is the submitter's own
(``blobs.require_owned``) BEFORE calling :func:`admit`: no answer may say anything about the
content of a blob someone else uploaded."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starforge.catalog.adapters.base import run_config
from starforge.catalog.checks import CheckContext, run_checks
from starforge.catalog.loader import Method, get_method
from starforge.catalog.locks import lock_state
from starforge.contract import observability, sensitive, steps
from starforge.contract.api import Quota
from starforge.contract.errors import CatalogMismatch, MissingBlobs, QuotaRejected, Rejected
from starforge.contract.jobspec import InputKind, JobSpec, Manifest
from starforge.contract.lineage import InitFrom
from starforge.contract.profiles import Pool, parse_profile_args, resolve
from starforge.contract.submission import INPUT_FLAGS, check_submission
from starforge.server.services.data.images import AdmittedImage
from starforge.server.services.scheduling import scheduler
from starforge.server.settings import NodeDef, ProfileDef
from starforge.server.storage import Storage
from starforge.steps import gate

if TYPE_CHECKING:
    from starforge.server.db.models import Run


@dataclass
class Admitted:
    method: Method
    pools: list[Pool]  # resolved once, the profile's env snapshotted in
    config: dict[str, Any]  # the experiment's config, composed once here; the runner reads it
    warnings: list[str] = field(default_factory=list)
    image: str = ""  # the image the run runs (pinned to a digest where one was resolved)
    image_source: str = ""  # which rule chose it (contract.images.ImageSource)
    init_from: InitFrom | None = None  # --init-from, resolved (services.runs.lineage)

    @property
    def gpus(self) -> int:
        return sum(p.total_gpus for p in self.pools)


def check_catalog(spec: JobSpec) -> tuple[Method, list[str]]:
    """The catalog handshake: the lock the submission carries against the server's catalog."""
    get_method(spec.method.id)  # an unknown method is its own error, with suggestions
    status = lock_state(spec.method)
    if status.state.submittable and status.method is not None:
        return status.method, [f"method lock: {r}" for r in status.reasons]
    server = status.method or get_method(spec.method.id)
    raise CatalogMismatch(
        f"stale lock: experiment {spec.experiment!r} is locked to {spec.method.id} "
        f"{spec.method.version} (framework {spec.method.framework_version or '?'}), the "
        f"server's catalog has {server.version} (framework {server.runtime.default}): "
        + "; ".join(status.reasons),
        hint=f"run `sf submit {spec.experiment} --upgrade-recipe ...` and commit the new "
        "method.lock.json (or update the client if the server is newer)",
        details={
            "method": server.id,
            "client_version": spec.method.version,
            "client_digest": spec.method.digest,
            "server_version": server.version,
            "server_digest": server.digest,
            "reasons": status.reasons,
        },
    )


def check_pipeline(spec: JobSpec, method: Method) -> None:
    """``--then`` steps the method declares, in an order it can run; a step run's StepSpec is
    the control plane's to write, never a submission's."""
    if spec.step is not None:
        raise Rejected(
            "spec.step is set by the platform for its step runs, not by a submission",
            hint="use `sf submit ... --then ACTION` or `sf export`",
        )
    steps.check_steps(spec.steps, method.actions, method.id)


def run_pools(run: Run) -> list[Pool]:
    """A run's pools as admission resolved them."""
    return stored_pools(run.pools)


def stored_pools(pools: list[dict[str, Any]]) -> list[Pool]:
    """The column ``runs.pools`` as typed pools (read leniently: it was stored): the one typed
    reader of that column."""
    return [Pool.read(p) for p in pools]


def compose_config(
    spec: JobSpec, method: Method, manifest: Manifest, storage: Storage
) -> dict[str, Any]:
    """The experiment's config composed from the package, with the recorded parameters applied."""
    by_path = {f.path: f.sha256 for f in manifest.files}

    def read(rel: str) -> str | None:
        digest = by_path.get(rel)
        return storage.read_blob(digest).decode() if digest else None

    return run_config(spec, method, read)


def check_fit(pools: list[Pool], inventory: list[NodeDef]) -> None:
    why = scheduler.never_fits(pools, inventory)
    if why is not None:
        raise Rejected(
            f"the run can never be placed: {why}",
            hint="ask for fewer GPUs or nodes (`sf status` lists the profiles and nodes)",
            details={"pools": [p.model_dump() for p in pools]},
        )


def check_quota(pools: list[Pool], quota: Quota) -> None:
    why = scheduler.beyond_quota(pools, scheduler.Limits.of(quota))
    if why is not None:
        raise QuotaRejected(
            f"your quota can never allow this run: {why}",
            hint="ask an admin to change your quota (`sf admin quota set USER ...`); "
            "`sf status` shows yours",
            details={"quota": quota.model_dump(), "pools": [p.model_dump() for p in pools]},
        )


def _under(path: str, roots: list[Path]) -> bool:
    return any(path == str(r) or path.startswith(str(r).rstrip("/") + "/") for r in roots)


def check_shared_input(name: str, value: str, shared_roots: list[Path]) -> None:
    """An absolute input is used in place by the job: admit it only under a configured shared
    root, and say so before the filesystem is touched, so the answer for ``/etc/shadow`` or the
    server's own token file does not depend on whether it exists (no existence oracle)."""
    lexical = os.path.normpath(value)  # "/data/../etc/shadow" is judged as "/etc/shadow"
    details = {"input": name, "path": value, "shared_roots": [str(r) for r in shared_roots]}
    if not _under(lexical, shared_roots):
        raise Rejected(
            f"input {name}: {value} is not under a shared root of this server",
            hint="an admin lists the folders jobs may read in place under `shared_roots` in "
            "server.yaml"
            + (f" (now: {', '.join(map(str, shared_roots))})" if shared_roots else " (none now)")
            + "; else pass a hub id or a path in the lab",
            details=details,
        )
    # Under a root by name: a symbolic link inside it must not lead out of every root.
    real = os.path.realpath(lexical)
    if not _under(real, [Path(os.path.realpath(r)) for r in shared_roots]):
        raise Rejected(
            f"input {name}: {value} leads out of the shared roots (a symbolic link)",
            hint="point the input at the data itself, inside a shared root",
            details=details,
        )
    if not os.path.exists(real):
        raise Rejected(
            f"input {name}: the shared path {value} does not exist on the server",
            hint="put the data on the shared storage or pass a hub id / a path in the lab",
            details=details,
        )


def check_input_locations(
    spec: JobSpec, manifest: Manifest, shared_roots: list[Path] | None = None
) -> None:
    """Where the given inputs are: a shared path under a shared root, a path in the package."""
    paths = {f.path for f in manifest.files}
    for name in INPUT_FLAGS:  # the one table of inputs (contract.submission)
        ref = getattr(spec.inputs, name)
        if ref is None:
            continue
        if ref.kind is InputKind.SHARED:
            check_shared_input(name, ref.value, shared_roots or [])
        if ref.kind is InputKind.PACKAGE:
            prefix = ref.value.rstrip("/") + "/"
            if ref.value not in paths and not any(p.startswith(prefix) for p in paths):
                raise Rejected(
                    f"input {name}: {ref.value} is not in the uploaded package",
                    hint="commit the file (the package holds only files git tracks)",
                    details={"input": name, "path": ref.value},
                )


def check_blobs(manifest: Manifest, storage: Storage) -> None:
    missing = storage.missing(manifest.digests())
    if missing:
        raise MissingBlobs(
            f"{len(missing)} file(s) of the package are not on the server: "
            f"{', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}",
            hint="upload them (POST /blobs/missing, then PUT /blobs/<sha256>) and submit again",
            details={"missing": missing},
        )


def check_observability(spec: JobSpec, method: Method, config: dict[str, Any]) -> None:
    """Platform methods refuse --observability-url, external ones need it; an external method's
    experiment may opt into the platform in its config (``starforge: {observability: platform}``).
    """
    mode = observability.mode_of(method.observability, config)
    observability.check_url(mode, spec.observability_url, method.id)


def _refuse_sensitive(manifest: Manifest, storage: Storage) -> None:
    """The content check on the first bytes of every stored blob of the package (read in one
    pass: the packs located in one lookup and opened once each, not once per file)."""
    heads = storage.heads(manifest.digests(), sensitive.HEAD_BYTES)
    sensitive.refuse_manifest(manifest, read_head=heads.get)


def admit(
    spec: JobSpec,
    manifest: Manifest,
    *,
    profiles: list[ProfileDef],
    inventory: list[NodeDef],
    storage: Storage,
    quota: Quota | None = None,
    shared_roots: list[Path] | None = None,
    executor_check: Callable[[list[Pool]], None] | None = None,
    image_check: Callable[[JobSpec, Method], AdmittedImage] | None = None,
    secrets_check: Callable[[JobSpec, dict[str, Any]], list[str]] | None = None,
    init_from_check: Callable[[JobSpec], InitFrom | None] | None = None,
    dataset_check: Callable[[JobSpec, dict[str, Any]], dict[str, Any]] | None = None,
) -> Admitted:
    """Check a submission end to end; raise the first problem found.

    ``executor_check`` rejects pools the executor can never place (Slurm: a series without a
    partition), before the fit check so the rejection names the setting to change.
    ``image_check`` (``services.data.images.admit_image``) resolves, allows and pins the run's
    image; it runs last, as it may ask a registry over the network. ``secrets_check``
    (``services.access.secrets.admit_secrets``) rejects a secret the user cannot use and runs the
    hub preflight of the model. ``dataset_check``
    (``services.data.datasets.admit``) resolves the dataset inputs and records them in the
    config."""
    # The packer's sensitive-file policy again, whichever client wrote the manifest.
    _refuse_sensitive(manifest, storage)
    method, warnings = check_catalog(spec)
    requests = parse_profile_args(spec.profiles)
    check_submission(spec, method, requests=requests, package={f.path for f in manifest.files})
    check_pipeline(spec, method)
    pools = resolve(requests, profiles, method.roles)
    if executor_check is not None:
        executor_check(pools)
    check_fit(pools, inventory)
    if quota is not None:
        check_quota(pools, quota)
    check_input_locations(spec, manifest, shared_roots)
    check_blobs(manifest, storage)
    config = compose_config(spec, method, manifest, storage)
    if dataset_check is not None:  # services.data.datasets.admit: resolve, record, strip the refs
        config = dataset_check(spec, config)
    check_observability(spec, method, config)
    run_checks(CheckContext(method, config, pools))
    gate.check_gate_config(method.id, config)  # a gate on a metric the eval never produces
    if spec.provenance.git_dirty:
        warnings.append("submitted from a tree with uncommitted changes")
    if spec.provenance.untracked:
        warnings.append(
            f"{len(spec.provenance.untracked)} untracked file(s) travelled with the "
            "run but are not in its commit"
        )
    admitted = Admitted(method=method, pools=pools, config=config, warnings=warnings)
    if secrets_check is not None:  # secrets the run names exist; the hub model is reachable
        admitted.warnings.extend(secrets_check(spec, config))
    if init_from_check is not None:  # the parent run exists, is the user's, has the artifact
        admitted.init_from = init_from_check(spec)
    if image_check is not None:
        image = image_check(spec, method)
        admitted.image, admitted.image_source = image.ref, str(image.source or "")
        admitted.warnings.extend(image.warnings)
    return admitted
