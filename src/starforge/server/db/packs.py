"""Where each packed blob lies: one row per blob stored in a pack file (``contract.packs``).

A blob of a batch is stored in the batch's pack file, and this table is what makes it a stored
blob: a row is written in the same transaction as the uploader's ``user_blobs`` rows, after the
pack is durable, so a crash leaves either a recorded, durable blob or an unrecorded pack file
(garbage: nothing names it, nothing reads it). A digest has one row: the latest pack to store
it (a blob is packed again only when the store lacks it, e.g. its pack file was lost).
"""

from __future__ import annotations

import json
from datetime import datetime

from sqlalchemy import BigInteger, Connection, String, bindparam, select, text
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.orm import Mapped, Session, mapped_column

from starforge.contract.packs import Extent
from starforge.server.db.models import Base, UTCDateTime, utcnow


class BlobPack(Base):
    __tablename__ = "blob_packs"

    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    pack: Mapped[str] = mapped_column(String(64))
    start: Mapped[int] = mapped_column(BigInteger)  # the blob's offset in the pack file
    size: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


_LOCATE = select(BlobPack.digest, BlobPack.pack, BlobPack.start, BlobPack.size).where(
    BlobPack.digest.in_(bindparam("digests", expanding=True))
)


def locate(session: Session | Connection, digests: list[str]) -> dict[str, Extent]:
    """The extents of those of ``digests`` that are packed."""
    found: dict[str, Extent] = {}
    wanted = sorted(set(digests))
    for i in range(0, len(wanted), 500):  # SQLite binds at most a few thousand parameters
        for digest, pack, start, size in session.execute(_LOCATE, {"digests": wanted[i : i + 500]}):
            found[digest] = Extent(pack, start, size)
    return found


def record(session: Session, pack: str, extents: dict[str, Extent]) -> None:
    """Record ``extents`` (all in ``pack``) in the caller's transaction, replacing the location
    a digest had (the caller packs only blobs the store lacks)."""
    if not extents:
        return
    now = utcnow()
    if session.get_bind().dialect.name == "sqlite":
        # One statement for the whole batch (see services.data.blobs.record_many for why).
        rows = json.dumps([[d, e.offset, e.size] for d, e in extents.items()])
        session.execute(_SQLITE_RECORD, {"pack": pack, "rows": rows, "now": now})
        return
    values = [
        {"digest": d, "pack": pack, "start": e.offset, "size": e.size, "created_at": now}
        for d, e in extents.items()
    ]
    insert = postgresql_insert(BlobPack.__table__)
    moved = {c: insert.excluded[c] for c in ("pack", "start", "size", "created_at")}
    session.execute(insert.on_conflict_do_update(index_elements=["digest"], set_=moved), values)


_SQLITE_RECORD = text(
    "INSERT OR REPLACE INTO blob_packs (digest, pack, start, size, created_at) "
    "SELECT json_extract(value, '$[0]'), :pack, json_extract(value, '$[1]'), "
    "json_extract(value, '$[2]'), :now FROM json_each(:rows)"
).bindparams(bindparam("now", type_=UTCDateTime()))
