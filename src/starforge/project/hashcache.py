"""The packer's hash cache: an unchanged file is not read again, like git's index.

One JSON file per lab under the client's home (``$STARFORGE_HOME/cache/hashes/``) maps each
lab-relative path to the stat it had when it was hashed (size, mtime and ctime in ns, inode,
device) and what reading it found (sha256, and that its content passed the sensitive-content
check). A file whose stat still matches is taken from the cache; any difference, including a
``touch``, a ``chmod`` or a rename over it (new inode or ctime), re-reads it.

Never stale: the stat of a file changed twice within one timestamp granule can look unchanged
(git calls it "racily clean"). So an entry is stored only when the file's mtime and ctime are
older than :data:`GRANULE_NS` before the moment its read started: a file that recent is hashed
again next time. The cache also records a fingerprint of the sensitive-content rules, so new
rules re-check every file. A cache that cannot be read or written is simply not used.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from starforge.contract import sensitive
from starforge.contract.atomic import write_bytes_atomic
from starforge.contract.names import is_sha256

# Coarser than every file system's timestamps we meet (FAT's 2 s, NFS's 1 s, ext4's tick).
GRANULE_NS = 2_000_000_000
_FORMAT = 1
_MAX_ENTRIES = 200_000


def default_dir() -> Path:
    """Where the caches live: the client's home (the same rule as ``starforge.client.config``)."""
    home = os.environ.get("STARFORGE_HOME") or Path.home() / ".starforge"
    return Path(home).expanduser() / "cache" / "hashes"


def _rules_fingerprint() -> str:
    try:
        return hashlib.sha256(Path(sensitive.__file__).read_bytes()).hexdigest()[:16]
    except OSError:
        return "unknown"


def stat_key(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


@dataclass
class CacheStats:
    hits: int = 0
    hashed: int = 0  # files read and hashed
    bytes_hashed: int = 0


class HashCache:
    """The stat → sha256 cache of one lab. ``lookup`` before reading, ``store`` after."""

    def __init__(self, root: Path, folder: Path | None = None, granule_ns: int = GRANULE_NS):
        real = os.path.realpath(root)
        name = hashlib.sha256(real.encode()).hexdigest()[:32] + ".json"
        self.path = (folder or default_dir()) / name
        self.granule_ns = granule_ns
        self.rules = _rules_fingerprint()
        self.entries: dict[str, list[object]] = {}
        self.stats = CacheStats()
        self._dirty = False
        self._load()

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if (
            isinstance(data, dict)
            and data.get("format") == _FORMAT
            and data.get("rules") == self.rules
            and isinstance(data.get("entries"), dict)
        ):
            self.entries = data["entries"]

    def lookup(self, rel: str, st: os.stat_result) -> str | None:
        """The cached sha256 of ``rel`` when its stat is exactly the one it was hashed with (a
        damaged entry, not a sha256, is a miss: the file is read again)."""
        entry = self.entries.get(rel)
        if (
            isinstance(entry, list)
            and len(entry) == 2
            and entry[0] == stat_key(st)
            and isinstance(entry[1], str)
            and is_sha256(entry[1])
        ):
            self.stats.hits += 1
            return entry[1]
        return None

    def store(self, rel: str, st: os.stat_result, digest: str, read_started_ns: int) -> None:
        """Remember ``digest`` for ``rel`` (stat taken before the read), unless racily clean."""
        self.stats.hashed += 1
        self.stats.bytes_hashed += st.st_size
        newest = max(st.st_mtime_ns, st.st_ctime_ns)
        if newest >= read_started_ns - self.granule_ns:
            # Changed so recently that a second change could keep this stat: re-hash next time.
            self.entries.pop(rel, None)
            self._dirty = True
            return
        self.entries[rel] = [stat_key(st), digest]
        self._dirty = True

    def save(self, keep: set[str] | None = None) -> None:
        """Write the cache atomically (best effort); past its size, keep only ``keep``."""
        if not self._dirty:
            return
        if keep is not None and len(self.entries) > _MAX_ENTRIES:
            self.entries = {k: v for k, v in self.entries.items() if k in keep}
        body = {"format": _FORMAT, "rules": self.rules, "entries": self.entries}
        with contextlib.suppress(OSError):
            # Compact, and not fsynced: a cache that is lost is only hashed again.
            data = json.dumps(body, separators=(",", ":")).encode("utf-8")
            write_bytes_atomic(self.path, data, mode=0o600, durable=False)
        self._dirty = False


def now_ns() -> int:
    """The wall clock in ns, the clock file timestamps are taken from."""
    return time.time_ns()
