"""The node's dataset cache: fetch a platform dataset version once, verified, for every run.

``<root>/cache/datasets/<owner>/<name>/<version>/`` holds one version's files, shared by all the
runs of the storage root. The runner reads the blobs straight from the root's content-addressed
store, a file of their own or an extent of a pack (as :mod:`starforge.runner.unpack` does for
packages); the version's manifest is a blob too,
named by the sha256 admission recorded, so what is fetched is exactly what was admitted.

Guarantees:

* every file is re-hashed while it is copied (a corrupt blob fails the attempt);
* a version is built in a staging folder beside its final name and renamed into place, so no
  reader ever sees half of one;
* a POSIX lock (``<version>.lock``, :func:`fcntl.lockf`, which also holds across the nodes of a
  shared file system) makes runs that need the same version at once fetch it once: the others
  wait and reuse it;
* an entry is trusted only with its marker (the manifest it holds, each file's size and
  modification time as written): a partial, edited or truncated entry is fetched again;
* with a size limit (:data:`LIMIT_ENV`, bytes, in the runner's environment), fetching a version
  evicts the least recently used versions that no running run uses until the cache fits: a run
  holds a shared lock on ``<version>.use`` for as long as its runner lives, and eviction takes
  only versions whose exclusive lock it gets at once. The marker's modification time is the
  version's last use.
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
from typing import IO, Any

from starforge.contract.datasets import CACHE_MARKER, Resolved, env_name
from starforge.contract.errors import RunnerError
from starforge.contract.jobspec import InputKind, InputRef, Manifest, check_relpath
from starforge.contract.layout import StorageLayout
from starforge.contract.names import check_name
from starforge.contract.packs import Extent, open_extent
from starforge.runner.unpack import _copy_verified, blob_source

LIMIT_ENV = "STARFORGE_DATASET_CACHE_BYTES"
_HELD: list[IO[bytes]] = []  # this runner's shared locks on the versions its run uses
_TRANSIENT = (".fetching-", ".stale-", ".evicted-")  # folders on their way in or out


def cache_dir(storage_root: Path, r: Resolved) -> Path:
    owner, name, version = (check_name(k, v) for k, v in _parts(r))
    return StorageLayout(storage_root).dataset_cache(owner, name, version)


def _parts(r: Resolved) -> list[tuple[str, str]]:
    return [("dataset owner", r.owner), ("dataset", r.name), ("dataset version", r.version)]


def load_manifest(
    storage_root: Path, digest: str, packs: dict[str, Extent] | None = None
) -> Manifest:
    """The version's manifest from the blob store, verified against its recorded sha256."""
    source = blob_source(storage_root, digest, packs or {})
    try:
        if source is None:
            raise FileNotFoundError(digest)
        path, extent = source
        with path.open("rb") if extent is None else open_extent(path, extent) as fh:
            data = fh.read()
    except (OSError, ValueError):
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


def hold(folder: Path) -> IO[bytes]:
    """A shared lock on ``folder``'s version for as long as the returned file stays open: an
    eviction waits for no one, it skips a version somebody holds (or is evicting it: then this
    waits until it is gone)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    fh = open(folder.with_name(folder.name + ".use"), "a+b")  # noqa: SIM115  (kept open)
    fcntl.flock(fh, fcntl.LOCK_SH)
    return fh


def ensure(
    storage_root: Path,
    r: Resolved,
    held: list[IO[bytes]] | None = None,
    packs: dict[str, Extent] | None = None,
) -> tuple[Path, bool]:
    """The cached folder of ``r``'s version, and whether this call fetched it (False: reused).

    With ``held``, the version's shared use lock is appended there (kept for the run's life);
    without it, the lock is released on return. ``packs``: the extents of the packed blobs (the
    run's ``run.json``)."""
    final = cache_dir(storage_root, r)
    manifest = load_manifest(storage_root, r.manifest_sha256, packs)
    use = hold(final)
    try:
        fetched = False
        if not is_complete(final, r.manifest_sha256, manifest):
            with _locked(final.with_name(final.name + ".lock")):
                if not is_complete(final, r.manifest_sha256, manifest):  # nobody fetched it
                    _fetch(storage_root, r.manifest_sha256, manifest, final, packs or {})
                    fetched = True
        os.utime(final / CACHE_MARKER)  # last used: now
    except BaseException:
        use.close()
        raise
    if held is None:
        use.close()
    else:
        held.append(use)
    return final, fetched


def _entry_bytes(folder: Path) -> int:
    try:
        marker = json.loads((folder / CACHE_MARKER).read_text(encoding="utf-8"))
        return sum(int(size) for size, _ in marker["files"].values())
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def evict(storage_root: Path, limit: int, keep: set[Path]) -> list[Path]:
    """Drop least recently used versions nobody uses until the cache holds at most ``limit``
    bytes (``keep``: never these); return the folders dropped."""
    base = StorageLayout(storage_root).root / "cache" / "datasets"
    entries = [
        m.parent
        for m in base.glob(f"*/*/*/{CACHE_MARKER}")
        if not any(part in m.parent.name for part in _TRANSIENT)
    ]
    sizes = {e: _entry_bytes(e) for e in entries}
    total = sum(sizes.values())
    dropped: list[Path] = []
    for entry in sorted(entries, key=_last_used):
        if total <= limit:
            break
        if entry in keep:
            continue
        with open(entry.with_name(entry.name + ".use"), "a+b") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a run uses it
            trash = entry.with_name(f"{entry.name}.evicted-{uuid.uuid4().hex[:8]}")
            os.rename(entry, trash)
            shutil.rmtree(trash, ignore_errors=True)
        total -= sizes[entry]
        dropped.append(entry)
    return dropped


def _last_used(folder: Path) -> int:
    try:
        return (folder / CACHE_MARKER).stat().st_mtime_ns
    except OSError:
        return 0


def cache_limit(environ: dict[str, str] | None = None) -> int | None:
    """The cache's size limit in bytes from :data:`LIMIT_ENV` (None: no limit)."""
    value = (environ if environ is not None else os.environ).get(LIMIT_ENV, "").strip()
    try:
        return int(value) if value else None
    except ValueError:
        return None


def _fetch(
    storage_root: Path, digest: str, manifest: Manifest, final: Path, packs: dict[str, Extent]
) -> None:
    staging = final.with_name(f"{final.name}.fetching-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        for entry in manifest.files:
            if entry.symlink is not None:
                raise RunnerError(f"dataset file {entry.path} is a link; datasets hold files")
            source = blob_source(storage_root, entry.sha256, packs)
            if source is None:
                raise RunnerError(f"blob of dataset file {entry.path} is missing ({entry.sha256})")
            _copy_verified(source[0], staging / entry.path, entry.sha256, source[1])
        for path in [staging, *staging.rglob("*")]:  # readable by every run's job user
            path.chmod(0o755 if path.is_dir() else 0o644)
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
    storage_root: Path,
    resolved: dict[str, Resolved],
    inputs: dict[str, InputRef | None],
    packs: dict[str, Extent] | None = None,
) -> tuple[dict[str, InputRef], dict[str, str], list[str]]:
    """Fetch every resolved dataset; return the inputs rewritten to their cached paths, the
    ``<NAME>_DATA_DIR`` variables, and one line per dataset for the log. ``packs``: the
    extents of the packed blobs (the run's ``run.json``)."""
    refs: dict[str, InputRef] = {}
    env: dict[str, str] = {}
    said: list[str] = []
    used: set[Path] = set()
    fetched_any = False
    for key, r in resolved.items():
        folder, fetched = ensure(storage_root, r, _HELD, packs)
        used.add(folder)
        fetched_any = fetched_any or fetched
        manifest = load_manifest(storage_root, r.manifest_sha256, packs)
        if inputs.get(key) is not None:
            location = _location(folder, r.path, manifest)
            refs[key] = InputRef(kind=InputKind.SHARED, value=str(location))
        env[env_name(r.name)] = str(folder)
        what = "fetched" if fetched else "reused the cached"
        said.append(f"{what} dataset {r.ref} ({manifest.total_bytes} bytes) in {folder}")
    limit = cache_limit()
    if fetched_any and limit is not None:
        for gone in evict(storage_root, limit, used):
            said.append(f"evicted the unused cached dataset {gone} (cache limit {limit} bytes)")
    return refs, env, said


def private_views(
    storage_root: Path, run_dir: Path, gid: int, folders: list[Path]
) -> dict[Path, Path]:
    """A run of its own uid reads its datasets through views of its own: each cached version's
    files hard-linked (copied across file systems) under ``<run>/datasets/``, in folders of the
    run's member group (0750), while the cache itself is closed to every uid but root's. So a run
    reads exactly the versions it was admitted with, and another member's private version stays
    unreadable even once cached. The links are root's and read-only: a job cannot change the
    cache through them. Returns cache folder -> view folder."""
    cache_root = storage_root / "cache" / "datasets"
    cache_root.mkdir(parents=True, exist_ok=True)
    os.chmod(cache_root, 0o700)
    views: dict[Path, Path] = {}
    base = run_dir / "datasets"
    for source in folders:
        target = base / source.relative_to(cache_root)
        if not target.exists():
            staging = target.with_name(f"{target.name}.linking-{uuid.uuid4().hex[:8]}")
            shutil.copytree(source, staging, copy_function=_link_or_copy)
            os.replace(staging, target)
        for folder in [base, *[p for p in target.parents if base in p.parents], target]:
            os.chown(folder, 0, gid)
            os.chmod(folder, 0o750)
        views[source] = target
    return views


def through_views(
    views: dict[Path, Path], refs: dict[str, InputRef], found: dict[str, str]
) -> tuple[dict[str, InputRef], dict[str, str]]:
    """``refs`` and ``found`` (paths into the cache) rewritten to the run's views of it."""

    def seen(path: str) -> str:
        for cached, view in views.items():
            if path == str(cached) or path.startswith(f"{cached}/"):
                return str(view) + path[len(str(cached)) :]
        return path

    moved = {k: r.model_copy(update={"value": seen(r.value)}) for k, r in refs.items()}
    return moved, {k: seen(v) for k, v in found.items()}


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
