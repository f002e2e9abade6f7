"""The packer: which files of a lab travel with a run, and their content-addressed manifest.

A package is the experiment's folder plus ``common/`` and ``configs/`` from git's own file list,
plus the files of inputs given as lab-relative paths (``--model models/tiny``), whether or not git
tracks them. Every file is named by its sha256, so the server stores each content once and an
unchanged resubmission uploads nothing. A sensitive file name anywhere in the package refuses the
whole package (``--allow-dirty`` does not lift this).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from starforge.contract.errors import InputNotFound, SensitiveFiles, UsageError
from starforge.contract.jobspec import FileEntry, InputKind, InputRef, Manifest
from starforge.contract.packaging import is_sensitive

SHARED_DIRS = ("common", "configs")
DATA_SUFFIXES = (".jsonl", ".json", ".parquet")
_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass
class ResolvedInput:
    ref: InputRef
    files: list[str] = field(default_factory=list)  # lab-relative, for PACKAGE inputs


def _looks_like_hub_id(value: str) -> bool:
    parts = value.split("/")
    return (
        len(parts) == 2
        and all(parts)
        and not value.startswith(".")
        and all(c.isalnum() or c in "-_." for c in value.replace("/", ""))
    )


def resolve_input(root: Path, flag: str, value: str, *, hub_ok: bool) -> ResolvedInput:
    """Turn ``--model``/``--train-data`` text into an input reference (and its files)."""
    if os.path.isabs(value):
        # Used in place on the shared storage; admission checks that it exists there.
        return ResolvedInput(InputRef(kind=InputKind.SHARED, value=os.path.normpath(value)))
    candidate = (root / value).resolve()
    if candidate.exists():
        try:
            rel = candidate.relative_to(root.resolve()).as_posix()
        except ValueError:
            raise UsageError(
                f"{flag} {value}: a relative path must stay inside the lab ({root})",
                hint="move the file into the lab, or give an absolute path on shared storage",
            ) from None
        files = (
            [rel]
            if candidate.is_file()
            else sorted(
                p.relative_to(root.resolve()).as_posix()
                for p in candidate.rglob("*")
                if p.is_file()
            )
        )
        if not files:
            raise InputNotFound(f"{flag} {value}: the folder {candidate} is empty")
        return ResolvedInput(InputRef(kind=InputKind.PACKAGE, value=rel), files)
    # `models/tiny` in a lab that has a models/ folder is a mistyped path, not a hub id.
    first = root / value.split("/", 1)[0]
    if hub_ok and _looks_like_hub_id(value) and not first.is_dir():
        return ResolvedInput(InputRef(kind=InputKind.HUB, value=value))
    raise InputNotFound(
        f"{flag} {value}: no such file or folder (looked at {candidate})",
        hint="paths are relative to the lab root; check the spelling"
        + (", or give a hub id like org/model" if hub_ok else ""),
    )


def check_data_format(flag: str, value: str) -> None:
    if not value.lower().endswith(DATA_SUFFIXES):
        raise UsageError(
            f"{flag} {value}: expected a JSONL or Parquet file",
            hint=f"supported suffixes: {', '.join(DATA_SUFFIXES)}",
        )


def refuse_sensitive(paths: list[str]) -> None:
    offenders = sorted(p for p in paths if is_sensitive(p))
    if offenders:
        raise SensitiveFiles(
            f"refusing to package {len(offenders)} secret-looking file(s): {', '.join(offenders)}",
            hint="secrets must not travel in a job package: move them out of the lab or rename "
            "them, and add them to .gitignore (--allow-dirty does not lift this)",
            details={"files": offenders},
        )


def build_manifest(root: Path, paths: list[str]) -> Manifest:
    """Hash every file (lab-relative paths) into a manifest, refusing secret-looking names."""
    unique = sorted(set(paths))
    refuse_sensitive(unique)
    entries = []
    for rel in unique:
        path = root / rel
        st = path.stat()
        entries.append(
            FileEntry(
                path=rel,
                sha256=sha256_file(path),
                size=st.st_size,
                executable=bool(st.st_mode & 0o111),
            )
        )
    return Manifest(files=entries)
