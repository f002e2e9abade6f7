"""Admission: every check a submission must pass before anything is created.

:func:`admit` is pure with respect to the database (it reads settings, the catalog, the storage
and the disk) and returns what the run will be; it raises a :mod:`starforge.contract.errors` class
naming what was wrong and what to do. Order: catalog handshake (the submission's lock against the
server's catalog), profiles, fit against the inventory, required inputs, the image, shared inputs
on disk, package inputs in the manifest, blobs present, the entrypoint in the package, and the
recorded parameters and framework checks again (the client's validation is not trusted).
Capacity that is merely busy is not checked here: the run queues. Nor is a quota that is merely
in use by the user's other runs (the run queues); a quota that can never allow the run (a profile
it excludes, more GPUs than its limits) is rejected with the numbers, right after the fit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from starforge.catalog.adapters.base import run_config
from starforge.catalog.checks import CheckContext, run_checks
from starforge.catalog.loader import EntrypointKind, Method, get_method
from starforge.catalog.locks import lock_state
from starforge.contract import images, observability, params, sensitive
from starforge.contract.api import Quota
from starforge.contract.errors import (
    CatalogMismatch,
    MissingBlobs,
    MissingInput,
    ParamError,
    QuotaRejected,
    Rejected,
)
from starforge.contract.jobspec import InputKind, JobSpec, Manifest
from starforge.contract.profiles import Pool, parse_profile_args, resolve
from starforge.server.services import scheduler
from starforge.server.settings import NodeDef, ProfileDef
from starforge.server.storage import Storage

# method.requires entry -> (JobSpec.inputs field, the CLI flag that sets it)
INPUT_FLAGS: dict[str, str] = {
    "model": "--model",
    "train_data": "--train-data",
    "validation_data": "--validation-data",
}


@dataclass
class Admitted:
    method: Method
    pools: list[Pool]
    warnings: list[str] = field(default_factory=list)

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


def check_params(
    spec: JobSpec, method: Method, manifest: Manifest, storage: Storage, pools: list[Pool]
) -> None:
    """Re-validate the recorded parameters and the framework's static checks."""
    for name, value in spec.hyperparams.items():
        param = method.params.get(name)
        if param is None:
            raise ParamError(
                f"parameter {name!r} is not declared by {method.id}",
                hint=params.suggest(name, sorted(method.params)),
            )
        params.check_value(name, param, value, f"hyperparams.{name}")
    missing = [n for n, p in method.params.items() if p.required and n not in spec.hyperparams]
    if missing:
        raise ParamError(f"required parameter(s) without a value: {', '.join(missing)}")
    by_path = {f.path: f.sha256 for f in manifest.files}

    def read(rel: str) -> str | None:
        digest = by_path.get(rel)
        return storage.blob_path(digest).read_text() if digest else None

    run_checks(CheckContext(method, run_config(spec, method, read), pools))


def check_image(spec: JobSpec, method: Method) -> None:
    if spec.image:
        images.check_image(spec.image)
    elif "image" in method.requires:
        raise MissingInput(
            f"method {method.id} needs --image",
            hint="e.g. --image reg.io/t:v1",
            details={"missing": ["--image"]},
        )


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


def check_inputs(spec: JobSpec, method: Method, manifest: Manifest) -> None:
    missing = [
        name
        for name in method.requires
        if name in INPUT_FLAGS and getattr(spec.inputs, name, None) is None
    ]
    if missing:
        flags = [INPUT_FLAGS.get(name, f"--{name.replace('_', '-')}") for name in missing]
        raise MissingInput(
            f"method {method.id} needs {', '.join(flags)}; the submission has no "
            f"{', '.join(missing)}",
            hint=f"add {' '.join(f + ' ...' for f in flags)} to `sf submit`",
            details={"missing": missing, "flags": flags},
        )
    paths = {f.path for f in manifest.files}
    for name in INPUT_FLAGS:
        ref = getattr(spec.inputs, name)
        if ref is None:
            continue
        if ref.kind is InputKind.SHARED and not Path(ref.value).exists():
            raise Rejected(
                f"input {name}: the shared path {ref.value} does not exist on the server",
                hint="put the data on the shared storage or pass a hub id / a path in the lab",
                details={"input": name, "path": ref.value},
            )
        if ref.kind is InputKind.PACKAGE:
            prefix = ref.value.rstrip("/") + "/"
            if ref.value not in paths and not any(p.startswith(prefix) for p in paths):
                raise Rejected(
                    f"input {name}: {ref.value} is not in the uploaded package",
                    hint="commit the file (the package holds only files git tracks)",
                    details={"input": name, "path": ref.value},
                )


def check_package(spec: JobSpec, method: Method, manifest: Manifest, storage: Storage) -> None:
    missing = storage.missing(manifest.digests())
    if missing:
        raise MissingBlobs(
            f"{len(missing)} file(s) of the package are not on the server: "
            f"{', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}",
            hint="upload them (POST /blobs/missing, then PUT /blobs/<sha256>) and submit again",
            details={"missing": missing},
        )
    entry = f"{spec.exp_dir}/{method.entrypoint.file}"
    in_package = method.entrypoint.kind in (EntrypointKind.PYTHON, EntrypointKind.BASH)
    if in_package and entry not in {f.path for f in manifest.files}:
        raise Rejected(
            f"the package has no {entry}: method {method.id} runs it as its entrypoint",
            hint=f"create {entry} in the experiment and commit it",
            details={"entrypoint": entry},
        )


def check_observability(
    spec: JobSpec, method: Method, manifest: Manifest, storage: Storage
) -> None:
    """Platform methods refuse --observability-url, external ones need it; an external method's
    experiment may opt into the platform in its config (``starforge: {observability: platform}``).
    """
    by_path = {f.path: f.sha256 for f in manifest.files}

    def read(rel: str) -> str | None:
        digest = by_path.get(rel)
        return storage.blob_path(digest).read_text() if digest else None

    mode = observability.mode_of(method.observability, run_config(spec, method, read))
    observability.check_url(mode, spec.observability_url, method.id)


def _blob_head(storage: Storage, digest: str) -> bytes | None:
    """The first bytes of a stored blob (what the content check reads), or None when absent."""
    path = storage.blob_path(digest)
    if not path.is_file():
        return None
    with path.open("rb") as fh:
        return fh.read(sensitive.HEAD_BYTES)


def admit(
    spec: JobSpec,
    manifest: Manifest,
    *,
    profiles: list[ProfileDef],
    inventory: list[NodeDef],
    storage: Storage,
    quota: Quota | None = None,
) -> Admitted:
    """Check a submission end to end; raise the first problem found."""
    # The packer's sensitive-file policy again, whichever client wrote the manifest.
    sensitive.refuse_manifest(manifest, read_head=lambda digest: _blob_head(storage, digest))
    method, warnings = check_catalog(spec)
    pools = resolve(parse_profile_args(spec.profiles), profiles, method.roles)
    check_fit(pools, inventory)
    if quota is not None:
        check_quota(pools, quota)
    check_inputs(spec, method, manifest)
    check_image(spec, method)
    check_package(spec, method, manifest, storage)
    check_observability(spec, method, manifest, storage)
    check_params(spec, method, manifest, storage, pools)
    if spec.provenance.git_dirty:
        warnings.append("submitted from a tree with uncommitted changes")
    if spec.provenance.untracked:
        warnings.append(
            f"{len(spec.provenance.untracked)} untracked file(s) travelled with the "
            "run but are not in its commit"
        )
    return Admitted(method=method, pools=pools, warnings=warnings)
