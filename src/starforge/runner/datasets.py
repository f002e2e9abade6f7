"""The node's dataset cache: fetch a platform dataset version once, verified, for every run.

``<root>/cache/datasets/<owner>/<name>/<version>/`` holds one version's files, shared by all the
runs of the storage root. The runner reads the blobs straight from the root's content-addressed
store (as :mod:`starforge.runner.unpack` does for packages); the version's manifest is a blob too,
named by the sha256 admission recorded, so what is fetched is exactly what was admitted.

Guarantees:

* every file is re-hashed while it is copied (a corrupt blob fails the attempt);
* a version is built in a staging folder beside its final name and renamed into place, so no
  reader ever sees half of one;
* a POSIX lock (``<version>.lock``, :func:`fcntl.lockf`, which also holds across the nodes of a
  shared file system) makes runs that need the same version at once fetch it once: the others
  wait and reuse it;
* an entry is trusted only with its marker (the manifest it holds, each file's size and
  modification time as written): a partial, edited or truncated entry is fetched again.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from starforge.contract.datasets import CACHE_MARKER, Resolved, env_name
from starforge.contract.errors import RunnerError
from starforge.contract.jobspec import InputKind, InputRef, Manifest, check_relpath
from starforge.contract.layout import StorageLayout
from starforge.contract.names import check_name
from starforge.runner.unpack import _copy_verified


def cache_dir(storage_root: Path, r: Resolved) -> Path:
    owner, name, version = (check_name(k, v) for k, v in _parts(r))
    return StorageLayout(storage_root).dataset_cache(owner, name, version)


def _parts(r: Resolved) -> list[tuple[str, str]]:
    return [("dataset owner", r.owner), ("dataset", r.name), ("dataset version", r.version)]


def load_manifest(storage_root: Path, digest: str) -> Manifest:
    """The version's manifest from the blob store, verified against its recorded sha256."""
    path = StorageLayout(storage_root).blob(digest)
    try:
        data = path.read_bytes()
    except OSError:
        raise RunnerError(f"the dataset manifest {digest} is missing from {storage_root}") from None
    if hashlib.sha256(data).hexdigest() != digest:
        raise RunnerError(f"the dataset manifest {digest} is corrupt in the blob store")
    return Manifest.read(data)


def _marker(folder: Path, digest: str, manifest: Manifest) -> dict[str, Any]:
    files = {}
    for entry in manifest.files:
        st = (folder / entry.path).stat()
        files[entry.path] = [st.st_size, st.st_mtime_ns]
    return {"manifest_sha256": digest, "files": files}


def is_complete(folder: Path, digest: str, manifest: Manifest) -> bool:
    """Whether ``folder`` holds exactly this version as fetched (marker, sizes, mtimes)."""
    try:
        marker = json.loads((folder / CACHE_MARKER).read_text(encoding="utf-8"))
        return bool(marker.get("manifest_sha256") == digest) and marker == _marker(
            folder, digest, manifest
        )
    except (OSError, ValueError, AttributeError):
        return False


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as fh:
        fcntl.lockf(fh, fcntl.LOCK_EX)  # blocks until the fetching run is done
        try:
            yield
        finally:
            fcntl.lockf(fh, fcntl.LOCK_UN)


def ensure(storage_root: Path, r: Resolved) -> tuple[Path, bool]:
    """The cached folder of ``r``'s version, and whether this call fetched it (False: reused)."""
    final = cache_dir(storage_root, r)
    manifest = load_manifest(storage_root, r.manifest_sha256)
    if is_complete(final, r.manifest_sha256, manifest):
        return final, False
    with _locked(final.with_name(final.name + ".lock")):
        if is_complete(final, r.manifest_sha256, manifest):  # another run fetched it meanwhile
            return final, False
        _fetch(storage_root, r.manifest_sha256, manifest, final)
    return final, True


def _fetch(storage_root: Path, digest: str, manifest: Manifest, final: Path) -> None:
    staging = final.with_name(f"{final.name}.fetching-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        for entry in manifest.files:
            if entry.symlink is not None:
                raise RunnerError(f"dataset file {entry.path} is a link; datasets hold files")
            src = StorageLayout(storage_root).blob(entry.sha256)
            if not src.is_file():
                raise RunnerError(f"blob of dataset file {entry.path} is missing ({entry.sha256})")
            _copy_verified(src, staging / entry.path, entry.sha256)
        marker = _marker(staging, digest, manifest)
        (staging / CACHE_MARKER).write_text(json.dumps(marker), encoding="utf-8")
        if final.exists():  # a partial or damaged entry: set it aside, then drop it
            trash = final.with_name(f"{final.name}.stale-{uuid.uuid4().hex[:8]}")
            os.rename(final, trash)
            shutil.rmtree(trash, ignore_errors=True)
        os.rename(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _location(folder: Path, path: str, manifest: Manifest) -> Path:
    if path == ".":
        return folder
    check_relpath(path)
    names = {f.path for f in manifest.files}
    prefix = path.rstrip("/") + "/"
    if path not in names and not any(n.startswith(prefix) for n in names):
        raise RunnerError(f"{path} is not in the dataset")
    return folder / path


def prepare(
    storage_root: Path, resolved: dict[str, Resolved], inputs: dict[str, InputRef | None]
) -> tuple[dict[str, InputRef], dict[str, str], list[str]]:
    """Fetch every resolved dataset; return the inputs rewritten to their cached paths, the
    ``<NAME>_DATA_DIR`` variables, and one line per dataset for the log."""
    refs: dict[str, InputRef] = {}
    env: dict[str, str] = {}
    said: list[str] = []
    for key, r in resolved.items():
        folder, fetched = ensure(storage_root, r)
        manifest = load_manifest(storage_root, r.manifest_sha256)
        if inputs.get(key) is not None:
            location = _location(folder, r.path, manifest)
            refs[key] = InputRef(kind=InputKind.SHARED, value=str(location))
        env[env_name(r.name)] = str(folder)
        what = "fetched" if fetched else "reused the cached"
        said.append(f"{what} dataset {r.ref} ({manifest.total_bytes} bytes) in {folder}")
    return refs, env, said
