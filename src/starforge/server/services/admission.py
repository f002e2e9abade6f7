"""Admission: every check a submission must pass before anything is created.

:func:`admit` is pure with respect to the database (it reads settings, the catalog, the storage
and the disk) and returns what the run will be; it raises a :mod:`starforge.contract.errors` class
naming what was wrong and what to do. Order: catalog handshake, profiles, fit against the
inventory, required inputs, shared inputs on disk, package inputs in the manifest, blobs present,
the entrypoint in the package. Capacity that is merely busy is not checked here: the run queues.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from starforge.catalog.loader import Method, get_method
from starforge.contract.errors import CatalogMismatch, MissingBlobs, MissingInput, Rejected
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


def check_catalog(spec: JobSpec) -> Method:
    method = get_method(spec.method.id)
    if spec.method.version != method.version or spec.method.digest != method.digest:
        raise CatalogMismatch(
            f"method {method.id}: your experiment is locked to version {spec.method.version} "
            f"(digest {spec.method.digest}) but the server's catalog has version "
            f"{method.version} (digest {method.digest})",
            hint="run `sf submit --upgrade-recipe` or update the client",
            details={
                "method": method.id,
                "client_version": spec.method.version,
                "client_digest": spec.method.digest,
                "server_version": method.version,
                "server_digest": method.digest,
            },
        )
    return method


def check_fit(pools: list[Pool], inventory: list[NodeDef]) -> None:
    why = scheduler.never_fits(pools, inventory)
    if why is not None:
        raise Rejected(
            f"the run can never be placed: {why}",
            hint="ask for fewer GPUs or nodes (`sf status` lists the profiles and nodes)",
            details={"pools": [p.model_dump() for p in pools]},
        )


def check_inputs(spec: JobSpec, method: Method, manifest: Manifest) -> None:
    missing = [name for name in method.requires if getattr(spec.inputs, name, None) is None]
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
    if entry not in {f.path for f in manifest.files}:
        raise Rejected(
            f"the package has no {entry}: method {method.id} runs it as its entrypoint",
            hint=f"create {entry} in the experiment and commit it",
            details={"entrypoint": entry},
        )


def admit(
    spec: JobSpec,
    manifest: Manifest,
    *,
    profiles: list[ProfileDef],
    inventory: list[NodeDef],
    storage: Storage,
) -> Admitted:
    """Check a submission end to end; raise the first problem found."""
    method = check_catalog(spec)
    pools = resolve(parse_profile_args(spec.profiles), profiles, method.roles)
    check_fit(pools, inventory)
    check_inputs(spec, method, manifest)
    check_package(spec, method, manifest, storage)
    warnings = []
    if spec.provenance.git_dirty:
        warnings.append("submitted from a tree with uncommitted changes")
    if spec.provenance.untracked:
        warnings.append(f"{len(spec.provenance.untracked)} untracked file(s) were not packed")
    return Admitted(method=method, pools=pools, warnings=warnings)
