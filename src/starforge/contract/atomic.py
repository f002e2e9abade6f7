"""The one atomic file writer shared by the server, the runner and the SDK.

A reader sees the old file or the whole new one, never a part, even after a crash: the content
goes to a temporary file with a unique name in the target's directory (two writers never share
one), is given its mode before its first byte, flushed and fsynced, renamed over the target, and
the directory is fsynced so the rename itself survives a power cut. On any failure the temporary
file is removed and the old file is left as it was. Two variants, by keyword:

- ``durable=False`` skips both fsyncs, for files that can be made again (a cache; a run's files
  the database says again): still atomic against a killed process, which the page cache covers.
- ``replace=False`` creates the file only where none is (linked into place, never renamed over),
  so a concurrent writer's file is never overwritten: :class:`FileExistsError` says it won.

This is the only module in ``contract`` that touches the disk; it stays here because the runner,
the SDK and the CLI may not import the server.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_bytes_atomic(
    path: Path, data: bytes, *, mode: int = 0o644, durable: bool = True, replace: bool = True
) -> None:
    """Replace ``path`` with ``data`` atomically (``mode`` 0600 for secrets); see the module's
    note for ``durable`` and ``replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)  # before the content lands: a secret is never readable by others
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # refuses a path that exists, atomically
            os.unlink(tmp)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable:
        _fsync_dir(path.parent)


def write_json_atomic(
    path: Path, payload: Any, *, mode: int = 0o644, durable: bool = True, replace: bool = True
) -> None:
    """Write ``payload`` as JSON (sorted keys, indented: these files are read by people too)."""
    text = json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n"
    write_bytes_atomic(path, text.encode("utf-8"), mode=mode, durable=durable, replace=replace)


def _fsync_dir(folder: Path) -> None:
    # Some file systems (and platforms) refuse to open or fsync a directory: the rename is
    # still atomic there, only its durability across a power cut is up to the file system.
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
