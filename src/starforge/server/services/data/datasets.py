"""Platform datasets: push (commit) a version, list, show, visibility, and admission's resolution.

A version is committed only when every file's blob was uploaded by its owner
(:func:`blobs.require_owned`), no path is sensitive (the packer's policy, re-checked here on names
and content) and the manifest is a plain tree (no links, no ``..``). Its canonical manifest is
stored as a blob too, named by its sha256: what a run records and the runner verifies. A version
is immutable: the identical push again answers ``created=False``; different files under the same
version are refused. Visibility is per dataset: a private dataset is its owner's alone, and to
anyone else it answers exactly like an unknown one (:class:`DatasetNotFound`), so nobody learns
that it exists.
"""

from __future__ import annotations

import difflib
import hashlib
import logging
from typing import Any, BinaryIO

from sqlalchemy import or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from starforge.contract import sensitive
from starforge.contract.datasets import (
    FLAGS,
    OUTPUT_SUBDIR,
    RESOLVED_KEY,
    DatasetList,
    DatasetPush,
    DatasetPushResult,
    DatasetRef,
    DatasetVersionView,
    Resolved,
    manifest_bytes,
    parse_ref,
    strip_refs,
)
from starforge.contract.errors import (
    DatasetNotFound,
    DatasetVersionExists,
    Forbidden,
    Rejected,
    UsageError,
)
from starforge.contract.jobspec import (
    FileEntry,
    InputKind,
    InputRef,
    JobSpec,
    Manifest,
    check_relpath,
)
from starforge.contract.states import JobStatus
from starforge.contract.submission import INPUT_FLAGS
from starforge.server.db.datasets import Dataset, DatasetVersion
from starforge.server.db.models import Run
from starforge.server.runtime import Runtime
from starforge.server.services.data import blobs
from starforge.server.services.observability import artifacts

log = logging.getLogger(__name__)


def _not_found(ref: str) -> DatasetNotFound:
    return DatasetNotFound(
        f"no dataset {ref} that you may read",
        hint="`sf dataset ls` lists your datasets and the public ones; check the owner, name "
        "and version",
        details={"dataset": ref},
    )


def _visible(user: str) -> Any:
    return or_(Dataset.owner == str(user), Dataset.public.is_(True))


def _dataset(session: Session, user: str, owner: str, name: str, shown: str = "") -> Dataset:
    """``OWNER/NAME`` if ``user`` may read it; else not found (``shown``: the ref as asked)."""
    row = session.get(Dataset, (owner, name))
    if row is None or not (row.public or row.owner == str(user)):
        raise _not_found(shown or f"{owner}/{name}")
    return row


def _view(row: DatasetVersion, public: bool, *, files: bool = False) -> DatasetVersionView:
    return DatasetVersionView(
        owner=row.owner,
        name=row.name,
        version=row.version,
        public=public,
        file_count=row.file_count,
        total_bytes=row.total_bytes,
        manifest_sha256=row.manifest_sha256,
        created_at=row.created_at,
        readme=row.readme,
        files=[FileEntry.read(f) for f in row.files] if files else [],
    )


def _check_files(rt: Runtime, user: str, req: DatasetPush) -> list[FileEntry]:
    if not req.files:
        raise UsageError(
            f"dataset {req.name}@{req.version} has no files",
            hint="push a folder that holds the dataset's files",
        )
    links = [f.path for f in req.files if f.symlink is not None]
    if links:
        raise UsageError(
            f"a dataset holds plain files only; links: {', '.join(links[:5])}",
            hint="replace each link with the file itself",
            details={"links": links[:100]},
        )
    manifest = Manifest(files=sorted(req.files, key=lambda f: f.path))  # one tree, no twins

    blobs.require_owned(rt, user, manifest.digests())  # before any blob is read
    heads = rt.storage.heads(manifest.digests(), sensitive.HEAD_BYTES)  # one pass, not per file
    sensitive.refuse_manifest(manifest, read_head=heads.get)
    return manifest.files


def push(rt: Runtime, user: str, req: DatasetPush) -> DatasetPushResult:
    """Commit ``user``/``req.name``@``req.version``, or say the identical version exists."""
    files = _check_files(rt, user, req)
    digest = rt.storage.put_bytes(manifest_bytes(files))
    ref = f"{user}/{req.name}@{req.version}"
    try:
        with rt.transaction() as session:
            existing = session.get(DatasetVersion, (str(user), req.name, req.version))
            if existing is None:
                _create(session, user, req, files, digest)
    except IntegrityError:  # a racing push of the same version committed first
        existing = None
    with rt.transaction() as session:
        row = session.get(DatasetVersion, (str(user), req.name, req.version))
        dataset = session.get(Dataset, (str(user), req.name))
        assert row is not None and dataset is not None
        created = existing is None and row.manifest_sha256 == digest
        if row.manifest_sha256 != digest:
            raise DatasetVersionExists(
                f"{ref} exists with other files; a version never changes once pushed",
                hint=f"push the new files as another version (`sf dataset push {req.name} "
                "VERSION DIR`)",
                details={"dataset": ref},
            )
        return DatasetPushResult(ref=ref, created=created, version=_view(row, dataset.public))


def _create(
    session: Session, user: str, req: DatasetPush, files: list[FileEntry], digest: str
) -> None:
    dataset = session.get(Dataset, (str(user), req.name))
    if dataset is None:
        session.add(Dataset(owner=str(user), name=req.name, public=req.public))
    elif req.public and not dataset.public:
        dataset.public = True
    session.add(
        DatasetVersion(
            owner=str(user),
            name=req.name,
            version=req.version,
            files=[f.model_dump(mode="json") for f in files],
            manifest_sha256=digest,
            file_count=len(files),
            total_bytes=sum(f.size for f in files),
            readme=req.readme,
        )
    )
    session.flush()


def list_versions(rt: Runtime, user: str, ref: str | None = None) -> DatasetList:
    """Every version ``user`` may read, newest first; only those of ``OWNER/NAME`` when given."""
    query = select(DatasetVersion, Dataset.public).join(
        Dataset, (Dataset.owner == DatasetVersion.owner) & (Dataset.name == DatasetVersion.name)
    )
    query = query.where(_visible(user))
    if ref:
        wanted = parse_ref(ref, "dataset", owner=str(user))
        query = query.where(Dataset.owner == wanted.owner, Dataset.name == wanted.name)
    with rt.transaction() as session:
        rows = session.execute(query.order_by(DatasetVersion.created_at.desc())).all()
        return DatasetList(versions=[_view(v, public) for v, public in rows])


def _version(session: Session, user: str, ref: DatasetRef) -> tuple[DatasetVersion, Dataset]:
    """The version ``ref`` names (the latest when it names none) that ``user`` may read."""
    dataset = _dataset(session, user, ref.owner, ref.name, str(ref))
    query = select(DatasetVersion).where(
        DatasetVersion.owner == ref.owner, DatasetVersion.name == ref.name
    )
    if ref.version:
        query = query.where(DatasetVersion.version == ref.version)
    row = session.scalars(query.order_by(DatasetVersion.created_at.desc()).limit(1)).first()
    if row is None:
        raise _not_found(str(ref))
    return row, dataset


def show(rt: Runtime, user: str, ref: str) -> DatasetVersionView:
    with rt.transaction() as session:
        row, dataset = _version(session, user, parse_ref(ref, "dataset", owner=str(user)))
        return _view(row, dataset.public, files=True)


def set_visibility(rt: Runtime, user: str, owner: str, name: str, public: bool) -> DatasetList:
    """Make ``OWNER/NAME`` public or private; its owner only."""
    with rt.transaction() as session:
        dataset = _dataset(session, user, owner, name)
        if dataset.owner != str(user):
            raise Forbidden(
                f"only {dataset.owner} may change the visibility of {owner}/{name}",
                details={"dataset": f"{owner}/{name}"},
            )
        dataset.public = public
    return list_versions(rt, user, f"{owner}/{name}")


# ---- admission ----------------------------------------------------------------------------


def _check_path(row: DatasetVersion, input_name: str, path: str) -> None:
    if path == ".":
        return
    ref = f"{row.owner}/{row.name}@{row.version}"
    try:
        check_relpath(path)
    except ValueError as exc:
        raise Rejected(
            f"{INPUT_FLAGS[input_name]} {path}: {exc}",
            hint=f"give a path inside the dataset; `sf dataset show {ref}` lists its files",
            details={"input": input_name, "path": path, "dataset": ref},
        ) from None
    names = [str(f["path"]) for f in row.files]
    prefix = path.rstrip("/") + "/"
    if path in names or any(n.startswith(prefix) for n in names):
        return
    close = difflib.get_close_matches(path, names, n=3, cutoff=0.4)
    raise Rejected(
        f"{INPUT_FLAGS[input_name]} {path}: no such file in dataset {ref}",
        hint=(f"did you mean {', '.join(close)}? " if close else "")
        + f"`sf dataset show {ref}` lists its files",
        details={"input": input_name, "path": path, "dataset": ref, "closest": close},
    )


def admit(rt: Runtime, user: str, spec: JobSpec, config: dict[str, Any]) -> dict[str, Any]:
    """Resolve the run's dataset inputs for ``user`` and record them in ``config`` (which loses
    its ``data.*.dataset`` references); raise when one is unknown, unreadable or lacks the file."""
    wanted = [
        (key, ref)
        for key in INPUT_FLAGS
        if (ref := getattr(spec.inputs, key)) is not None and ref.kind is InputKind.DATASET
    ]
    # Reads only, and only when the run names a dataset: most submits open no transaction here.
    resolved = _resolve(rt, user, wanted) if wanted else {}
    if spec.output_dataset:
        check_output(rt, user, spec.output_dataset)
    config = strip_refs(config)
    if resolved:
        config[RESOLVED_KEY] = resolved
    return config


def _resolve(rt: Runtime, user: str, wanted: list[tuple[str, InputRef]]) -> dict[str, Any]:
    resolved: dict[str, Any] = {}
    with rt.reading() as session:
        for key, ref in wanted:
            parsed = parse_ref(ref.dataset, FLAGS.get(key, key))
            row, _ = _version(session, user, parsed)
            _check_path(row, key, ref.value)
            resolved[key] = Resolved(
                owner=row.owner,
                name=row.name,
                version=row.version,
                path=ref.value,
                manifest_sha256=row.manifest_sha256,
            ).model_dump(mode="json")
    return resolved


# ---- --output-dataset -------------------------------------------------------------------------

_CHUNK = 1 << 20


def check_output(rt: Runtime, user: str, value: str) -> DatasetRef:
    """``--output-dataset``: the caller's own namespace, a version that does not exist yet."""
    ref = parse_ref(value, "--output-dataset")
    if ref.owner != str(user) or not ref.version:
        raise Rejected(
            f"--output-dataset {value}: a run publishes only into your own datasets, "
            "with a version",
            hint=f"e.g. --output-dataset {user}/{ref.name}@v1",
            details={"dataset": value},
        )
    with rt.transaction() as session:
        if session.get(DatasetVersion, (ref.owner, ref.name, ref.version)) is not None:
            raise DatasetVersionExists(
                f"--output-dataset {value}: that version exists; a version never changes",
                hint="name a new version",
                details={"dataset": value},
            )
    return ref


def _store_file(rt: Runtime, user: str, fh: BinaryIO) -> tuple[str, int]:
    """Store the open file's content as a blob of ``user``'s; its digest and size."""
    digest, size = hashlib.sha256(), 0
    while chunk := fh.read(_CHUNK):
        digest.update(chunk)
        size += len(chunk)
    name = digest.hexdigest()
    if not rt.storage.has(name):
        writer = rt.storage.blob_writer(name)  # it checks that the bytes hash to the name
        fh.seek(0)
        try:
            while chunk := fh.read(_CHUNK):
                writer.write(chunk)
        except BaseException:
            writer.abort()
            raise
        writer.commit()
    blobs.record(rt, user, name)
    return name, size


def publish_output(rt: Runtime, run_id: str) -> DatasetPushResult | None:
    """Publish a succeeded run's ``FORGE_DATASET_OUT_DIR`` as its ``--output-dataset`` (None when
    the run asked for none, or has not succeeded). Its owner's push, with the same checks."""
    with rt.reading() as session:
        run = session.get(Run, run_id)
        if run is None or run.status != JobStatus.SUCCEEDED:
            return None
        spec = JobSpec.read(run.spec)
        user = run.user
        run_dir = rt.storage.layout_of(run).dir
    if not spec.output_dataset:
        return None
    ref = parse_ref(spec.output_dataset, "--output-dataset")
    files = []
    # The job wrote the folder: links are never followed, files are read by descriptor.
    for found in artifacts.regular_files(run_dir, artifacts.OUT, OUTPUT_SUBDIR, hidden=True):
        with artifacts.open_found(found) as fh:
            digest, size = _store_file(rt, user, fh)
        files.append(FileEntry(path=found.rel, sha256=digest, size=size))
    body = DatasetPush(name=ref.name, version=ref.version, files=files)
    return push(rt, user, body)
