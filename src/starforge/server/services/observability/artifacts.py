"""A run's output folder (``<run dir>/out``), read by the server: what the console lists and what
``--output-dataset`` publishes.

The job wrote ``out/``, so nothing in it is trusted. Invariants:

- A symbolic link is never followed: a link to ``/etc/passwd``, to the server's key or into
  another run is neither listed nor read, and nothing about its target (whether it exists, its
  size, its date, its kind) changes any answer.
- Folders are walked by descriptor (:func:`os.fwalk`), from the run's folder down: a folder
  swapped for a link while it is walked is not entered, and ``out`` (or a folder under it that
  was asked for) being a link yields nothing.
- Only regular files are yielded (no fifo to block on, no device), and a file is opened relative
  to its folder's descriptor with ``O_NOFOLLOW``, checked to be the file that was listed.
- A name that is not UTF-8 is shown with its bytes escaped (``\\xff``): every answer is JSON.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from starforge.contract.api import ArtifactEntry
from starforge.contract.layout import OUT

MAX_ARTIFACTS = 500


@dataclass(frozen=True)
class Found:
    """One regular file under the walked folder; ``dir_fd`` is open only while it is yielded."""

    rel: str  # the path under the folder, as the file system spells it (posix)
    name: str
    dir_fd: int
    st: os.stat_result


def shown_name(rel: str) -> str:
    """``rel`` as JSON can carry it: a name that is not UTF-8 (its bytes came back from the file
    system as surrogates) with those bytes escaped."""
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(rel).decode("utf-8", "backslashreplace")
    return rel


def regular_files(base: Path, *parts: str, hidden: bool = False) -> Iterator[Found]:
    """The regular files under ``base/parts...`` in path order, links never followed; hidden
    files and folders skipped unless ``hidden``. ``base`` is the platform's (the run's folder);
    ``parts`` are the job's (``out``, ``out/dataset``), so none of them may be a link."""
    try:
        parent = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        for part in parts[:-1]:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
            os.close(parent)
            parent = inner
        # fwalk lists nothing when its top is a link (it compares the top's lstat with its fd's).
        top = parts[-1] if parts else "."
        for folder, dirs, files, dir_fd in os.fwalk(top, dir_fd=parent, follow_symlinks=False):
            dirs[:] = sorted(d for d in dirs if hidden or not d.startswith("."))
            for name in sorted(f for f in files if hidden or not f.startswith(".")):
                try:
                    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                except OSError:
                    continue  # removed while we walked
                if stat.S_ISREG(st.st_mode):  # not a link (never followed), a fifo, a device
                    rel = os.path.relpath(os.path.join(folder, name), top)
                    yield Found(rel=Path(rel).as_posix(), name=name, dir_fd=dir_fd, st=st)
    except OSError:
        return  # a part is absent, or a link
    finally:
        os.close(parent)


def open_found(found: Found) -> BinaryIO:
    """Open a file :func:`regular_files` yielded (while it is yielded): never through a link,
    and only if it is still the file that was listed (else :class:`OSError`)."""
    fd = os.open(found.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=found.dir_fd)
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or not os.path.samestat(now, found.st):
            raise OSError(f"{found.rel} changed while it was read")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def listing(run_dir: Path, limit: int = MAX_ARTIFACTS) -> tuple[list[ArtifactEntry], bool]:
    """What the console lists of the run's ``out``: its visible regular files, at most
    ``limit``; and whether the list was cut."""
    entries: list[ArtifactEntry] = []
    for found in regular_files(run_dir, OUT):
        if len(entries) >= limit:
            return entries, True
        entries.append(
            ArtifactEntry(
                path=shown_name(found.rel),
                size=found.st.st_size,
                modified=datetime.fromtimestamp(found.st.st_mtime, UTC),
            )
        )
    return entries, False
