"""Blob uploads: which blobs a user lacks, and streaming one upload into the store.

An upload is published only if its content hashes to the digest it was sent under and stays
within ``max_blob_bytes`` (:class:`starforge.server.storage.BlobWriter`); otherwise nothing is
left behind. Existence is answered per user (:mod:`starforge.server.db.blobs`): a digest is
present for a user only after that user uploaded content hashing to it, so nobody learns from
``/blobs/missing`` what another user stored, and a submission may use only blobs its user sent
(:func:`require_owned`). A blob the store already holds is hashed but not written again, then
recorded as the user's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from starforge.contract.api import MAX_DIGESTS
from starforge.contract.errors import InvalidName, MissingBlobs
from starforge.contract.names import is_sha256
from starforge.server.db.blobs import UserBlob
from starforge.server.runtime import Runtime


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


def owned(session: Session, user: str, digests: list[str]) -> set[str]:
    """Which of ``digests`` ``user`` has uploaded."""
    found: set[str] = set()
    wanted = sorted(set(digests))
    for i in range(0, len(wanted), 500):  # SQLite binds at most a few thousand parameters
        chunk = wanted[i : i + 500]
        found.update(
            session.scalars(
                select(UserBlob.digest).where(UserBlob.user == user, UserBlob.digest.in_(chunk))
            )
        )
    return found


def missing(rt: Runtime, user: str, digests: list[str]) -> list[str]:
    """The digests ``user`` must upload: those the user never sent, or the store lost."""
    _check(digests)
    with rt.transaction() as session:
        have = owned(session, user, digests)
    return sorted({d for d in digests if d not in have or not rt.storage.has(d)})


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
    with rt.transaction() as session:
        dialect = session.get_bind().dialect.name
        insert = postgresql_insert if dialect == "postgresql" else sqlite_insert
        session.execute(insert(UserBlob).values(user=user, digest=digest).on_conflict_do_nothing())


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
