"""Blob uploads: which blobs a user lacks, and streaming one upload into the store.

An upload is published only if its content hashes to the digest it was sent under and stays
within ``max_blob_bytes`` (:class:`starforge.server.storage.BlobWriter`); otherwise nothing is
left behind. Existence is answered per user (:mod:`starforge.server.db.blobs`): a digest is
present for a user only after that user uploaded content hashing to it, so nobody learns from
``/blobs/missing`` what another user stored, and a submission may use only blobs its user sent
(:func:`require_owned`). A blob the store already holds is hashed but not written again, then
recorded as the user's.

Small blobs also come many to a request (:func:`upload_batch`, framed as
:mod:`starforge.contract.blobbatch`): the whole batch is verified, blob by blob, before anything
is written, so a batch with one wrong blob leaves nothing behind. The batch's blobs the store
lacks are then written one after another into ONE pack file (``<root>/blobs/packs/<id>.pack``,
:mod:`starforge.contract.packs`; creating thousands of small files costs ~0.4 ms each on an ext4
disk, one file of the same bytes ~26 ms), made durable with one ``syncfs`` of the store's file
system (an ``fsync`` where that call is missing), and only then recorded: each blob's extent
(:mod:`starforge.server.db.packs`) in the same transaction as the uploader's ownership. A crash
leaves either recorded, durable blobs or an unrecorded pack file, which nothing names or reads
(harmless garbage, left in place: telling it from a pack whose batch is being recorded would
need the database's answer under the writers' lock).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import hashlib
import json
import os
import threading
import uuid
from collections.abc import AsyncIterator

from sqlalchemy import Connection, bindparam, select, text
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.orm import Session

from starforge.contract import blobbatch
from starforge.contract.api import MAX_DIGESTS
from starforge.contract.errors import BlobDigestMismatch, BodyTooLarge, InvalidName, MissingBlobs
from starforge.contract.names import is_sha256
from starforge.contract.packs import PACK_SUFFIX, Extent
from starforge.server.db import packs
from starforge.server.db.blobs import UserBlob
from starforge.server.db.models import UTCDateTime, utcnow
from starforge.server.runtime import Runtime
from starforge.server.storage import Storage


def _check(digests: list[str]) -> None:
    bad = [d for d in digests if not is_sha256(d)]
    if bad:
        raise InvalidName(
            f"not sha256 digests: {', '.join(repr(d) for d in bad[:5])}",
            hint="digests are 64 lowercase hex characters",
            details={"invalid": bad[:50]},
        )
    if len(digests) > MAX_DIGESTS:
        raise InvalidName(f"at most {MAX_DIGESTS} digests per request (got {len(digests)})")


_OWNED = select(UserBlob.digest).where(
    UserBlob.user == bindparam("user"), UserBlob.digest.in_(bindparam("digests", expanding=True))
)


def owned(session: Session | Connection, user: str, digests: list[str]) -> set[str]:
    """Which of ``digests`` ``user`` has uploaded (a Core read: a submit passes its snapshot's
    connection, which skips the session's statement machinery)."""
    found: set[str] = set()
    wanted = sorted(set(digests))
    for i in range(0, len(wanted), 500):  # SQLite binds at most a few thousand parameters
        chunk = wanted[i : i + 500]
        found.update(session.scalars(_OWNED, {"user": user, "digests": chunk}))
    return found


_OWNED_AT = (
    select(UserBlob.digest, packs.BlobPack.pack, packs.BlobPack.start, packs.BlobPack.size)
    .outerjoin(packs.BlobPack, packs.BlobPack.digest == UserBlob.digest)
    .where(
        UserBlob.user == bindparam("user"),
        UserBlob.digest.in_(bindparam("digests", expanding=True)),
    )
)


def owned_at(
    session: Session | Connection, user: str, digests: list[str]
) -> tuple[set[str], dict[str, Extent]]:
    """:func:`owned`, and where each of those is packed (:func:`packs.locate`), in one read."""
    found: set[str] = set()
    extents: dict[str, Extent] = {}
    wanted = sorted(set(digests))
    for i in range(0, len(wanted), 500):  # SQLite binds at most a few thousand parameters
        chunk = {"user": user, "digests": wanted[i : i + 500]}
        for digest, pack, start, size in session.execute(_OWNED_AT, chunk):
            found.add(digest)
            if pack is not None:
                extents[digest] = Extent(pack, start, size)
    return found, extents


def missing(rt: Runtime, user: str, digests: list[str]) -> list[str]:
    """The digests ``user`` must upload: those the user never sent, or the store lost."""
    _check(digests)
    with rt.reading() as session:
        have = owned(session, user, digests)
    lacking = set(digests) - have
    return sorted(lacking.union(rt.storage.missing(sorted(have))))


def require_owned(rt: Runtime, user: str, digests: list[str]) -> None:
    """Admit a package only with blobs its submitter has uploaded: a digest someone else stored
    is not readable by knowing its name (the same answer as ``/blobs/missing`` gives)."""
    lacking = missing(rt, user, digests)
    if lacking:
        raise MissingBlobs(
            f"{len(lacking)} file(s) of the package are not on the server: "
            f"{', '.join(lacking[:8])}{' ...' if len(lacking) > 8 else ''}",
            hint="upload them (POST /blobs/missing, then PUT /blobs/<sha256>) and submit again",
            details={"missing": lacking[:1000]},
        )


def record(rt: Runtime, user: str, digest: str) -> None:
    """Note that ``user`` has uploaded ``digest``; two racing uploads of it record it once."""
    record_many(rt, user, [digest])


def record_many(
    rt: Runtime, user: str, digests: list[str], packed: tuple[str, dict[str, Extent]] | None = None
) -> None:
    """Note that ``user`` has uploaded each of ``digests``, in one transaction; ``packed``: the
    pack file written for them and the extents of the blobs it stores, recorded in the same
    transaction (so a blob is owned only once it is stored, and stored only once owned)."""
    wanted = sorted(set(digests))
    if not wanted:
        return
    now = utcnow()
    with rt.transaction() as session:
        if packed is not None:
            packs.record(session, *packed)
        if session.get_bind().dialect.name == "sqlite":
            # One statement and one row of parameters for the whole batch (the digests as one
            # JSON array): executing a statement per row costs ~25 us each in the driver.
            params = {"user": user, "digests": json.dumps(wanted), "now": now}
            session.execute(_SQLITE_RECORD, params)
            return
        rows = [{"user": user, "digest": d, "created_at": now} for d in wanted]
        # A Core statement on the table (not the ORM's bulk path), executed for every row.
        session.execute(postgresql_insert(UserBlob.__table__).on_conflict_do_nothing(), rows)


_SQLITE_RECORD = text(
    'INSERT OR IGNORE INTO user_blobs ("user", digest, created_at) '
    "SELECT :user, value, :now FROM json_each(:digests)"
).bindparams(bindparam("now", type_=UTCDateTime()))


async def upload(rt: Runtime, user: str, digest: str, chunks: AsyncIterator[bytes]) -> int:
    """Stream ``chunks`` into the store under ``digest`` for ``user``; return the size."""
    writer = rt.storage.blob_writer(digest, max_bytes=rt.settings.max_blob_bytes)
    try:
        async for chunk in chunks:
            if chunk:
                writer.write(chunk)
    except BaseException:
        writer.abort()
        raise
    # fsync and rename can take a while on a busy disk: keep them off the event loop.
    size = await asyncio.to_thread(writer.commit)
    await asyncio.to_thread(record, rt, user, digest)
    return size


async def upload_batch(rt: Runtime, user: str, chunks: AsyncIterator[bytes]) -> tuple[int, int]:
    """Store a batch of blobs for ``user``; return (blobs, bytes). The body is bounded by its
    route's limit (:mod:`starforge.server.api.bodies`) before it gets here."""
    body = bytearray()
    async for chunk in chunks:
        body += chunk
    return await asyncio.to_thread(store_batch, rt, user, bytes(body))


def store_batch(rt: Runtime, user: str, body: bytes) -> tuple[int, int]:
    """Verify every blob of ``body``, then pack the new ones, sync once and record them all."""
    frames = blobbatch.parse(body)
    limit = rt.settings.max_blob_bytes
    for digest, data in frames:
        if len(data) > limit:
            raise BodyTooLarge(
                f"the blob {digest} ({len(data)} bytes) is larger than the blob limit "
                f"of {limit} bytes",
                details={"limit": limit, "sha256": digest},
            )
        actual = hashlib.sha256(data).hexdigest()
        if actual != digest:
            raise BlobDigestMismatch(
                f"a blob of the batch hashes to {actual}, not to its name {digest}; "
                "nothing of the batch was kept",
                hint="a file changed while it was uploaded; submit again",
                details={"expected": digest, "actual": actual, "size": len(data)},
            )
    # Held until the extents are recorded: a later batch then sees these blobs as stored and
    # does not pack them again.
    with _WRITING:
        packed = _pack(rt.storage, frames)
        record_many(rt, user, [d for d, _ in frames], packed)
    return len(frames), sum(len(data) for _, data in frames)


def _pack(
    storage: Storage, frames: list[tuple[str, memoryview]]
) -> tuple[str, dict[str, Extent]] | None:
    """Write the blobs the store lacks into one new pack file and make it durable; return its
    name and their extents (None: the store holds them all). On an error the file is removed."""
    new: dict[str, memoryview] = {}
    for digest, data in frames:
        new.setdefault(digest, data)  # parse() checked each name, and its content hashed to it
    stored = set(new) - set(storage.missing(list(new)))
    extents: dict[str, Extent] = {}
    name = uuid.uuid4().hex + PACK_SUFFIX
    offset = 0
    for digest, data in new.items():
        if digest not in stored:  # already stored: the upload proved the sender has the content
            extents[digest] = Extent(name, offset, len(data))
            offset += len(data)
    if not extents:
        return None
    path = str(storage.layout.pack(name))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        _write_new(path, b"".join(new[d] for d in extents), chmod=not _umask_keeps_644())
        _sync([path])
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    return name, extents


def _write_new(path: str, data: bytes, chmod: bool = True) -> None:
    """Create ``path`` (it must not exist) holding ``data``, readable by the runners (``chmod``:
    when the umask would take a read bit away)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if chmod:
            os.fchmod(fd, 0o644)
    finally:
        os.close(fd)


def _sync(paths: list[str]) -> None:
    """Make ``paths`` durable: one syncfs(2) of their file system, else one fsync each."""
    if not paths:
        return
    fd = os.open(paths[0], os.O_RDONLY)
    try:
        if _SYNCFS is not None and _SYNCFS(fd) == 0:
            return
    finally:
        os.close(fd)
    for path in [*paths, *sorted({os.path.dirname(p) for p in paths})]:  # files, then names
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _load_syncfs() -> object | None:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        return getattr(ctypes.CDLL(name, use_errno=True), "syncfs", None)
    except OSError:
        return None


def _umask_keeps_644() -> bool:
    """Whether files created 0o644 come out 0o644 (else each is chmodded): read from
    ``/proc/self/status``, since setting the umask to read it would race other threads."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8) & 0o644 == 0
    except (OSError, ValueError, IndexError):
        pass
    return False


_SYNCFS = _load_syncfs()
# Batches are packed and recorded one at a time: a blob two racing batches both lack is then
# stored once, and concurrent writers would only queue on the disk and the interpreter lock.
_WRITING = threading.Lock()
