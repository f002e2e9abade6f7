"""Pack files: many small blobs in one file of the blob store, and how a reader finds one.

A batch of small blobs (:mod:`starforge.contract.blobbatch`) is stored as one file,
``<root>/blobs/packs/<32 hex>.pack`` (:meth:`StorageLayout.pack`), holding the blobs' bytes one
after another; the server's database records each blob's :class:`Extent` (pack, offset, size).
Runners have no database: the server writes the extents a run needs into its ``run.json``
(``"packs": {sha256: [pack, offset, size]}``), and :func:`read_extents` takes them back, refusing
anything that could name a file outside the pack store or a negative range. :func:`open_extent`
reads exactly one blob's bytes (never its neighbours'); the reader still hashes what it reads, so a
wrong offset or a tampered pack shows up as a corrupt blob, never as wrong bytes used.
"""

from __future__ import annotations

import io
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from starforge.contract.errors import RunnerError
from starforge.contract.names import is_sha256

PACK_SUFFIX = ".pack"
_PACK_NAME = re.compile(r"[0-9a-f]{32}\.pack")


def is_pack_name(name: object) -> bool:
    """Whether ``name`` is a pack's file name (32 lowercase hex + ``.pack``: no path, no ``..``)."""
    return isinstance(name, str) and _PACK_NAME.fullmatch(name) is not None


@dataclass(frozen=True)
class Extent:
    """Where one blob lies: ``size`` bytes from ``offset`` in the pack file ``pack``."""

    pack: str
    offset: int
    size: int

    def wire(self) -> list[Any]:
        return [self.pack, self.offset, self.size]


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def read_extents(raw: object) -> dict[str, Extent]:
    """The ``packs`` entry of a ``run.json``, checked: a sha256 key, a pack file name, and a
    non-negative offset and size each; anything else fails the attempt."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise RunnerError("run.json: 'packs' is not a mapping; resubmit the run")
    found: dict[str, Extent] = {}
    for digest, value in raw.items():
        ok = isinstance(value, list) and len(value) == 3
        if not (ok and is_sha256(digest) and is_pack_name(value[0])):
            raise RunnerError(f"run.json: the pack entry of {digest!r} is not a pack in the store")
        if not (_int(value[1]) and _int(value[2])):
            raise RunnerError(f"run.json: the pack entry of {digest!r} has a bad offset or size")
        found[digest] = Extent(value[0], value[1], value[2])
    return found


class _Bounded(io.RawIOBase):
    """Reads at most ``size`` bytes of ``fh`` from where it stands."""

    def __init__(self, fh: BinaryIO, size: int) -> None:
        self._fh = fh
        self._left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        want = min(len(buffer), self._left)
        if want <= 0:
            return 0
        got = self._fh.readinto(memoryview(buffer)[:want]) or 0
        self._left -= got
        return got

    def close(self) -> None:
        self._fh.close()
        super().close()


def open_extent(path: Path | str, extent: Extent) -> BinaryIO:
    """A binary reader of exactly ``extent``'s bytes of the pack at ``path``. Raises
    :class:`FileNotFoundError` when the pack is absent and :class:`ValueError` when the extent
    reaches past the pack's end (a truncated pack, or an offset no blob has)."""
    fh = open(path, "rb")  # noqa: SIM115  (handed to the reader, which closes it)
    try:
        end = os.fstat(fh.fileno()).st_size
        if extent.offset + extent.size > end:
            raise ValueError(
                f"bytes {extent.offset}..{extent.offset + extent.size} are past the end of "
                f"{extent.pack} ({end} bytes)"
            )
        fh.seek(extent.offset)
    except BaseException:
        fh.close()
        raise
    return io.BufferedReader(_Bounded(fh, extent.size))  # type: ignore[return-value]
