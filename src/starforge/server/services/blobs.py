"""Blob uploads: which blobs the store lacks, and streaming one upload into the store.

An upload is published only if its content hashes to the digest it was sent under
(:class:`starforge.server.storage.BlobWriter`); otherwise nothing is left behind.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from starforge.contract.errors import InvalidName
from starforge.contract.names import is_sha256
from starforge.server.runtime import Runtime

MAX_DIGESTS = 100_000


def missing(rt: Runtime, digests: list[str]) -> list[str]:
    bad = [d for d in digests if not is_sha256(d)]
    if bad:
        raise InvalidName(
            f"not sha256 digests: {', '.join(repr(d) for d in bad[:5])}",
            hint="digests are 64 lowercase hex characters",
            details={"invalid": bad[:50]},
        )
    if len(digests) > MAX_DIGESTS:
        raise InvalidName(f"at most {MAX_DIGESTS} digests per request (got {len(digests)})")
    return rt.storage.missing(digests)


async def upload(rt: Runtime, digest: str, chunks: AsyncIterator[bytes]) -> int:
    """Stream ``chunks`` into the store under ``digest``; return the size stored."""
    writer = rt.storage.blob_writer(digest)
    try:
        async for chunk in chunks:
            if chunk:
                writer.write(chunk)
    except BaseException:
        writer.abort()
        raise
    # fsync and rename can take a while on a busy disk: keep them off the event loop.
    return await asyncio.to_thread(writer.commit)
