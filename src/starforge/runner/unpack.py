"""Verify and unpack a package from the content-addressed blob store into the run's work dir.

Every file is re-hashed while it is copied, so a corrupt blob fails the attempt instead of
training on wrong bytes. A blob is a file of its own or an extent of a pack file; the run's
``run.json`` names the packed ones (:func:`starforge.contract.packs.read_extents`, which refuses a
pack name or range that could read outside the pack store), and exactly the extent is read.
The work dir is built beside its final name and renamed into place, and a marker names the
manifest it holds, so a retried attempt reuses a complete work dir and never sees half of one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from starforge.contract.env import Binding
from starforge.contract.errors import RunnerError
from starforge.contract.jobspec import Manifest
from starforge.contract.layout import UNPACKED_MARKER, StorageLayout
from starforge.contract.packs import Extent, open_extent

_CHUNK = 1 << 20
_PEER_UNPACK_WAIT_S = 600.0


def manifest_digest(manifest: Manifest) -> str:
    canonical = json.dumps(manifest.model_dump(mode="json"), sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _copy_verified(src: Path, dst: Path, expected: str, extent: Extent | None = None) -> None:
    """Copy the blob ``expected`` from its file ``src`` (or from ``extent`` of the pack file
    ``src``) to ``dst``, failing the attempt unless its bytes hash to ``expected``."""
    digest = hashlib.sha256()
    dst.parent.mkdir(parents=True, exist_ok=True)
    with _open_blob(src, expected, extent) as fin, dst.open("wb") as fout:
        while chunk := fin.read(_CHUNK):
            digest.update(chunk)
            fout.write(chunk)
    if digest.hexdigest() != expected:
        raise RunnerError(
            f"blob {expected} is corrupt (its content hashes to "
            f"{digest.hexdigest()}); resubmit the run"
        )


Source = tuple[Path, "Extent | None"]


def blob_source(storage_root: Path, digest: str, packs: dict[str, Extent]) -> Source | None:
    """Where the blob ``digest`` is read from: its own file, else its extent of a pack (None:
    neither is there). ``packs`` comes from ``read_extents``: each pack name is a file name."""
    own = StorageLayout(storage_root).blob(digest)
    if own.is_file():
        return own, None
    extent = packs.get(digest)
    if extent is None:
        return None
    pack = StorageLayout(storage_root).pack(extent.pack)
    return (pack, extent) if pack.is_file() else None


def _open_blob(src: Path, expected: str, extent: Extent | None) -> BinaryIO:
    if extent is None:
        return src.open("rb")
    try:
        return open_extent(src, extent)
    except ValueError as exc:  # an extent past the pack's end: no blob lies there
        raise RunnerError(f"blob {expected} is corrupt ({exc}); resubmit the run") from None


def _link(manifest: Manifest, staging: Path) -> None:
    """Recreate the package's symlinks. Each must point at a plain file of the same package (and
    content), so no link can lead out of the work dir, whatever the manifest says."""
    plain = {e.path: e.sha256 for e in manifest.files if e.symlink is None}
    for entry in manifest.files:
        if entry.symlink is None:
            continue
        if plain.get(entry.link_target or "") != entry.sha256:
            raise RunnerError(
                f"{entry.path} is a symlink to {entry.symlink}, which is not a file of the "
                "package; resubmit the run"
            )
        dst = staging / entry.path
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(entry.symlink, dst)


def unpack(
    manifest: Manifest, storage_root: Path, work_dir: Path, packs: dict[str, Extent] | None = None
) -> int:
    """Materialise ``manifest`` in ``work_dir``; returns how many files it wrote (0 = reused).
    ``packs``: the extents of the packed blobs, from the run's ``run.json``."""
    want = manifest_digest(manifest)
    marker = work_dir / UNPACKED_MARKER
    if marker.is_file() and json.loads(marker.read_text()).get("manifest") == want:
        return 0
    staging = work_dir.with_name(f"{work_dir.name}.unpacking-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        for entry in manifest.files:
            if entry.symlink is not None:
                continue  # links are made once every file is in place (see _link)
            source = blob_source(storage_root, entry.sha256, packs or {})
            if source is None:
                raise RunnerError(
                    f"blob for {entry.path} ({entry.sha256}) is missing from "
                    f"{storage_root}; resubmit the run"
                )
            dst = staging / entry.path
            _copy_verified(source[0], dst, entry.sha256, source[1])
            if entry.executable:
                dst.chmod(0o755)
        _link(manifest, staging)
        (staging / UNPACKED_MARKER).write_text(json.dumps({"manifest": want}))
        if work_dir.exists():
            # An incomplete or different work dir from an earlier attempt: replace it whole.
            shutil.rmtree(work_dir)
        os.rename(staging, work_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return len(manifest.files)


def prepare_work_dir(
    b: Binding, manifest: Manifest, packs: dict[str, Extent], say: Callable[[str], None]
) -> None:
    """The run's work dir for this node: node 0 unpacks the package; the other nodes share the
    storage and wait for node 0's complete work dir."""
    work = Path(b.work_dir)
    if b.node_rank == 0:
        written = unpack(manifest, Path(b.storage_root), work, packs)
        what = f"unpacked {written} files" if written else "reused the unpacked package"
        say(f"{what} ({manifest.total_bytes} bytes) into {work}")
        return
    want = manifest_digest(manifest)
    deadline = time.monotonic() + _PEER_UNPACK_WAIT_S
    while time.monotonic() < deadline:
        marker = work / UNPACKED_MARKER
        if marker.is_file() and json.loads(marker.read_text()).get("manifest") == want:
            return
        time.sleep(0.2)
    raise RunnerError("node 0 did not unpack the package in time")
