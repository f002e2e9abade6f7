"""The packer: which files of a lab travel with a run, and their content-addressed manifest.

A package is the experiment's folder plus ``common/`` and ``configs/`` from git's own file list,
plus the files of inputs given as lab-relative paths (``--model models/tiny``), whether or not git
tracks them. Every file is named by its sha256, so the server stores each content once and an
unchanged resubmission uploads nothing. The sensitive-file policy
(:mod:`starforge.contract.sensitive`: names and content) is applied to every file, tracked or not,
and one offender refuses the whole package (``--allow-dirty`` does not lift this). Symlinks are
never followed out of the lab: a link travels (as a link) only when it resolves to a file that
travels too. A file whose stat is unchanged since it was last packed is not read again
(:mod:`starforge.project.hashcache`, which never returns a stale digest).
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import stat
from dataclasses import dataclass, field
from pathlib import Path

from starforge.contract import blobbatch, sensitive
from starforge.contract.errors import InputNotFound, UsageError
from starforge.contract.jobspec import InputKind, InputRef, Manifest
from starforge.contract.sensitive import Finding
from starforge.project.hashcache import HashCache, now_ns, stat_key

SHARED_DIRS = ("common", "configs")
KEEP_BYTES = 256 << 20  # small files' contents kept in memory for the upload, at most
DATA_SUFFIXES = (".jsonl", ".json", ".parquet")
_CHUNK = 1 << 20


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


def build_manifest(
    root: Path,
    paths: list[str],
    cache: HashCache | None = None,
    keep: dict[str, bytes] | None = None,
) -> Manifest:
    """Hash every file (lab-relative paths) into a manifest; refuse the whole package, naming
    every offender and why, when any file is sensitive (by name or content) or is a link that
    leaves the package. Links inside the package travel as links. ``cache``: the lab's hash
    cache (by default the one in the client's home). ``keep``: filled with the content, by
    sha256, of the small files read here (at most :data:`KEEP_BYTES` in all), so that uploading
    them needs no second read and sends exactly what was hashed and checked."""
    unique = sorted(set(paths))
    packed = set(unique)
    real_root = Path(os.path.realpath(root))
    if cache is None:
        cache = HashCache(root)
    rows: list[dict[str, object]] = []
    findings: dict[str, Finding] = {}
    kept = _Kept(keep)
    for rel in unique:
        got = _pack_one(root, real_root, rel, packed, cache, kept)
        if isinstance(got, Finding):
            findings[rel] = got
        else:
            rows.append(got)
    cache.save(keep=packed)
    # Every entry validated as strictly as FileEntry(...) would, in one call for all of them:
    # one validation per file cost more in calls than in checks.
    manifest = Manifest.model_validate({"files": rows})
    links = any(f.rule.startswith("link.") for f in findings.values())
    sensitive.refuse(
        findings,
        extra_hint="; replace a link that leaves the package with the file itself" if links else "",
    )
    return manifest


@dataclass
class _Kept:
    """Small files' contents kept for the upload, within a budget of memory."""

    into: dict[str, bytes] | None
    size: int = 0

    def wants(self, size: int) -> bool:
        return (
            self.into is not None
            and size <= blobbatch.SMALL_BLOB_BYTES
            and self.size + size <= KEEP_BYTES
        )

    def add(self, digest: str, data: bytes) -> None:
        if self.into is not None and digest not in self.into:
            self.into[digest] = data
            self.size += len(data)


def _pack_one(
    root: Path, real_root: Path, rel: str, packed: set[str], cache: HashCache, kept: _Kept
) -> dict[str, object] | Finding:
    """One file's entry (the fields of a FileEntry), or why it may not travel. A link is
    never followed out of the lab."""
    where = f"{root}/{rel}"  # a string: pathlib's parsing costs more than the stat
    try:
        st: os.stat_result | None = os.lstat(where)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISREG(st.st_mode):
        # The cache keeps only files that passed the name and content checks of these rules.
        digest = cache.lookup(rel, st)
        if digest is not None:
            return _row(rel, digest, st.st_size, bool(st.st_mode & 0o111))
    found = sensitive.check_path(rel)
    if found is not None:
        return found
    if st is None:
        return Finding("file.special", "not a regular file")
    link: str | None = None
    if stat.S_ISLNK(st.st_mode):
        target = _link_target(Path(where), real_root, packed)
        if isinstance(target, Finding):
            return target
        link = posixpath.relpath(target, posixpath.dirname(rel) or ".")
        st = os.stat(where)
    elif stat.S_ISDIR(st.st_mode):
        return Finding("file.directory", "a directory, not a file (a git submodule?)")
    elif not stat.S_ISREG(st.st_mode):
        return Finding("file.special", "not a regular file")
    started = now_ns()
    digest, size, head, after, whole = _hash(where, st.st_size, keep=kept.wants(st.st_size))
    found = sensitive.check_content(head)
    if found is not None:
        return found
    if whole is not None and kept.wants(len(whole)):
        kept.add(digest, whole)
    if link is None and size == st.st_size and stat_key(after) == stat_key(st):
        cache.store(rel, st, digest, started)
    return _row(rel, digest, size, bool(after.st_mode & 0o111), link)


def _row(
    rel: str, digest: str, size: int, executable: bool, link: str | None = None
) -> dict[str, object]:
    """A FileEntry's fields (``symlink`` only for a link, as FileEntry leaves it unset)."""
    row: dict[str, object] = {"path": rel, "sha256": digest, "size": size, "executable": executable}
    if link is not None:
        row["symlink"] = link
    return row


def _link_target(path: Path, real_root: Path, packed: set[str]) -> str | Finding:
    """The lab-relative file a link resolves to, when that file travels in the package too."""
    real = Path(os.path.realpath(path))
    try:
        target = real.relative_to(real_root).as_posix()
    except ValueError:
        return Finding("link.outside", "a symlink that leads out of the lab")
    if real.is_dir():
        return Finding(
            "link.directory",
            f"a symlink to the folder {target}/: packages carry files and links to files only",
        )
    if target not in packed:
        return Finding("link.unpacked", f"a symlink to {target}, which is not in the package")
    return sensitive.check_path(target) or target


def _hash(
    path: str, size_hint: int, keep: bool = False
) -> tuple[str, int, bytes, os.stat_result, bytes | None]:
    """sha256, size, the first bytes (for the content check) in one read, the stat after it
    (a file that changed while it was read is not cached), and with ``keep`` the whole content
    (what was hashed, whatever the file holds now). ``size_hint`` (the stat's size) sizes the
    first read, so a small file costs one buffer of its size rather than one of a chunk; the
    file is read to its end whatever its size is now."""
    digest = hashlib.sha256()
    size = 0
    chunks: list[bytes] = []
    fd = os.open(path, os.O_RDONLY)  # no file object: its buffering is unused here
    try:
        chunk = os.read(fd, min(max(size_hint, 0) + 1, _CHUNK))
        head = chunk[: sensitive.HEAD_BYTES]
        while chunk:
            if len(head) < sensitive.HEAD_BYTES and size:
                head += chunk[: sensitive.HEAD_BYTES - len(head)]
            digest.update(chunk)
            size += len(chunk)
            if keep:
                chunks.append(chunk)
            chunk = os.read(fd, _CHUNK)
        after = os.fstat(fd)
    finally:
        os.close(fd)
    whole = (chunks[0] if len(chunks) == 1 else b"".join(chunks)) if keep else None
    return digest.hexdigest(), size, head, after, whole
