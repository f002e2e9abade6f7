"""Which user has uploaded which blob.

The blob store is shared and content-addressed, but whether it holds a digest is answered per
user: a digest is *present* for a user only once that user has sent content hashing to it. So
``/blobs/missing`` tells nobody what another user uploaded, and a re-upload of a stored blob is
cheap (hashed, not written) and then recorded here.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from starforge.server.db.models import Base, UTCDateTime, utcnow


class UserBlob(Base):
    __tablename__ = "user_blobs"

    user: Mapped[str] = mapped_column(String(100), primary_key=True)
    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
