"""The report spool a job left in its run's ``out`` dir, read and removed by those who trust it not.

The report SDK (:class:`starforge.client.sender.Spool`) writes the bodies it could not deliver as
JSON lines in ``out/.starforge/report-spool/spool-<host>-<pid>-<id>.jsonl``, and a process that
replays one renames it ``<name>.<pid>.sending`` first. After the job, its runner sends what is
left (:mod:`starforge.runner.spooldrain`) and the server ingests the rest when it ends the run
(:mod:`starforge.server.services.observability.spooled`). Both may hold more rights than the job
(root, on a server that gives each run a uid), and the folder is the job's: so nothing here follows
a link, the folders ``.starforge`` and ``report-spool`` included (``O_NOFOLLOW`` from ``out`` down),
only regular files are read, at most ``max_bytes`` in all, and nothing is ever written there; a file
is only removed, by name, in the folder that was opened. A line that is not a JSON object (cut by
a crash mid-write) is skipped. Kept in ``contract`` beside :mod:`starforge.contract.atomic`:
the runner and the server may not import each other.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starforge.contract.layout import REPORT_SPOOL

MAX_BYTES = 256 << 20  # what one pass reads: far more than the SDK spools (1M points ~ 40 MB)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


@dataclass(frozen=True)
class SpoolFile:
    name: str
    data: bytes

    def bodies(self) -> Iterator[tuple[bytes, dict[str, Any]]]:
        """Each line that is a JSON object: its bytes and its value, in order."""
        for line in self.data.splitlines():
            try:
                body = json.loads(line)
            except ValueError:
                continue
            if isinstance(body, dict):
                yield line, body


@dataclass
class Taken:
    """Files read from one run's spool, to remove once what they held is stored."""

    out_dir: Path
    names: list[str] = field(default_factory=list)

    def remove(self) -> None:
        remove(self.out_dir, self.names)


def is_spool_name(name: str) -> bool:
    """A spool file, or one a replayer claimed (and may have died holding)."""
    if not name.startswith("spool-"):
        return False
    return name.endswith(".jsonl") or (".jsonl." in name and name.endswith(".sending"))


def points_of(body: dict[str, Any]) -> int:
    steps = body.get("steps")
    if not isinstance(steps, list):
        return 0
    return sum(len(s.get("values") or {}) for s in steps if isinstance(s, dict))


@contextlib.contextmanager
def _spool_dir(out_dir: Path) -> Iterator[int | None]:
    """A descriptor of the spool folder reached without following a link; None when absent."""
    try:
        fd = os.open(out_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        yield None
        return
    try:
        for part in REPORT_SPOOL.split("/"):
            inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
    except OSError:  # absent (the common case), or a link
        os.close(fd)
        yield None
        return
    try:
        yield fd
    finally:
        os.close(fd)


def read(out_dir: Path, max_bytes: int = MAX_BYTES) -> list[SpoolFile]:
    """The spool's regular files, oldest first, as long as they fit in ``max_bytes`` together."""
    with _spool_dir(out_dir) as fd:
        if fd is None:
            return []
        found: list[tuple[float, str]] = []
        for entry in os.scandir(fd):
            if not is_spool_name(entry.name):
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                found.append((info.st_mtime, entry.name))
        files: list[SpoolFile] = []
        left = max_bytes
        for _, name in sorted(found):
            data = _read_regular(fd, name, left)
            if data is None:
                continue
            files.append(SpoolFile(name, data))
            left -= len(data)
        return files


def _read_regular(dir_fd: int, name: str, limit: int) -> bytes | None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        return fh.read(info.st_size)


def remove(out_dir: Path, names: list[str]) -> None:
    """Remove the named spool files (what was read of them has been stored)."""
    if not names:
        return
    with _spool_dir(out_dir) as fd:
        if fd is None:
            return
        for name in names:
            if is_spool_name(name):
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=fd)
