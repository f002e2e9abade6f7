"""Verify and unpack a package from the content-addressed blob store into the run's work dir.

Every file is re-hashed while it is copied, so a corrupt blob fails the attempt instead of
training on wrong bytes. The work dir is built beside its final name and renamed into place, and a
marker names the manifest it holds, so a retried attempt reuses a complete work dir and never sees
half of one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from starforge.contract.errors import RunnerError
from starforge.contract.jobspec import Manifest
from starforge.contract.layout import UNPACKED_MARKER, StorageLayout

_CHUNK = 1 << 20


def manifest_digest(manifest: Manifest) -> str:
    canonical = json.dumps(manifest.model_dump(mode="json"), sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _copy_verified(src: Path, dst: Path, expected: str) -> None:
    digest = hashlib.sha256()
    dst.parent.mkdir(parents=True, exist_ok=True)
    with src.open("rb") as fin, dst.open("wb") as fout:
        while chunk := fin.read(_CHUNK):
            digest.update(chunk)
            fout.write(chunk)
    if digest.hexdigest() != expected:
        raise RunnerError(
            f"blob {expected} is corrupt (its content hashes to "
            f"{digest.hexdigest()}); resubmit the run"
        )


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


def unpack(manifest: Manifest, storage_root: Path, work_dir: Path) -> int:
    """Materialise ``manifest`` in ``work_dir``; returns how many files it wrote (0 = reused)."""
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
            src = StorageLayout(storage_root).blob(entry.sha256)
            if not src.is_file():
                raise RunnerError(
                    f"blob for {entry.path} ({entry.sha256}) is missing from "
                    f"{storage_root}; resubmit the run"
                )
            dst = staging / entry.path
            _copy_verified(src, dst, entry.sha256)
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
