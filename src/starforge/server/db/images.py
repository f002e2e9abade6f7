"""The admins' image settings: a default image per framework and the registry allowlist.

Both are read at every admission (``server/services/data/images.py``) and written only through the
admin routes; ``server.yaml`` adds to them (``runtime_images``, ``allowed_registries``).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from starforge.server.db.models import Base, UTCDateTime, utcnow


class ImageDefault(Base):
    """``sf admin image default FRAMEWORK REF``: the second rule of the resolution order."""

    __tablename__ = "image_defaults"

    framework: Mapped[str] = mapped_column(String(100), primary_key=True)
    ref: Mapped[str] = mapped_column(String(1024))
    set_by: Mapped[str] = mapped_column(String(100), default="")
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class AllowedRegistry(Base):
    """``sf admin registry allow HOST[:PORT][/PREFIX]``: one entry of the allowlist."""

    __tablename__ = "allowed_registries"

    entry: Mapped[str] = mapped_column(String(400), primary_key=True)
    added_by: Mapped[str] = mapped_column(String(100), default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
