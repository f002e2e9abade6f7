"""Pending submissions: the idempotency key of one ``sf submit`` invocation, kept for its retries.

Every invocation sends a key of its own, so two identical submissions started at once make two
runs. Before ``POST /jobs`` the invocation writes ``$STARFORGE_HOME/pending/<digest>.<key>.json``
and holds an exclusive lock on it (:func:`fcntl.flock`) for as long as its request is in flight;
the digest is the sha256 of what is submitted (the spec with its commit, the manifest, the retry
limit), not of where: the embedded server comes back on another port after a crash, and the
server only compares a key with the same user's keys. The invocation's own retry of a lost
response sends the same key. Once the server has answered, run made or request refused, the
record is removed (:meth:`Pending.clear`).

A lost response the invocation gave up on, a Ctrl-C or a crash leaves the record behind,
unlocked (:meth:`Pending.release`, or the kernel at the process's end). The next submission of
the same content takes it over, under the same lock, and sends its key: the server returns the
run it may already have made instead of making a second one. A record whose lock is held belongs
to an invocation still in flight and is never taken over, and two reruns racing for one record
cannot both win its lock. Records older than ``MAX_AGE_S`` are deleted unused, so a stale one
cannot swallow tomorrow's submission.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from starforge.client import config

MAX_AGE_S = 24 * 3600.0


def folder(base: Path | None = None) -> Path:
    return (base or config.home()) / "pending"


def digest_of(body: dict[str, Any]) -> str:
    """The identity of a submission: its content, not the moment or the URL it was sent to."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


class Pending:
    """One invocation's key and its record, locked until :meth:`clear` or :meth:`release`."""

    def __init__(self, path: Path, key: str, reused: bool, fd: int) -> None:
        self.path = path
        self.key = key
        self.reused = reused  # True when an earlier, unanswered submission left this key
        self._fd: int | None = fd

    def clear(self) -> None:
        """The server answered: the record goes (the next submission of this content is new)."""
        self.path.unlink(missing_ok=True)
        self.release()

    def release(self) -> None:
        """This invocation is done without an answer: the record stays for a rerun to take."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # the lock goes with the descriptor

    def __enter__(self) -> Pending:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()


def _locked(path: Path) -> int | None:
    """A descriptor of ``path`` holding its exclusive lock; None when another process holds it
    (an invocation in flight) or the file is gone."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # Locked the file that still bears the name (not one its owner removed meanwhile).
        if os.fstat(fd).st_ino == os.stat(path).st_ino:
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _read_key(fd: int) -> str | None:
    try:
        data = json.loads(os.pread(fd, 4096, 0))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or time.time() - float(data.get("at", 0)) > MAX_AGE_S:
        return None
    key = data.get("key")
    return key if isinstance(key, str) and len(key) >= 8 else None


def _take_over(digest: str, where: Path) -> Pending | None:
    """The record an unanswered earlier submission of ``digest`` left, now locked by us."""
    for path in sorted(where.glob(f"{digest}.*.json")):
        fd = _locked(path)
        if fd is None:
            continue
        key = _read_key(fd)
        if key is not None and path.name == f"{digest}.{key}.json":
            return Pending(path, key, reused=True, fd=fd)
        path.unlink(missing_ok=True)  # stale or broken: nobody will send it
        os.close(fd)
    return None


def _new(digest: str, where: Path) -> Pending:
    """A fresh key whose record is locked before its name appears (no one can take it over)."""
    key = uuid.uuid4().hex
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"{digest}.{key}.json"
    staged = where / f".{digest}.{key}.staged"
    fd = os.open(staged, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, json.dumps({"key": key, "at": time.time()}).encode())
        os.fsync(fd)
        os.replace(staged, path)  # the lock is the inode's: it comes along
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            staged.unlink()
        raise
    return Pending(path, key, reused=False, fd=fd)


def open_pending(body: dict[str, Any], base: Path | None = None) -> Pending:
    """This invocation's key: the one an unanswered earlier submission of the same content left
    (taken over), else a new one. Written and locked before the request leaves: a crash after it
    keeps the key for the rerun."""
    digest = digest_of(body)
    where = folder(base)
    return _take_over(digest, where) or _new(digest, where)
