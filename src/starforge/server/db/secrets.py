"""Users' and the lab's secrets, encrypted at rest (``server/services/access/secrets.py`` owns
them).

A row holds the ciphertext and the id of the key that sealed it, never the value: the key lives
outside the database (a 0600 file in the server's folder, or the environment), so a copy of the
database file alone reveals nothing. ``owner`` is the user for ``scope = user`` and "" for a
lab-wide secret (one an admin set for every user's runs).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from starforge.server.db.models import Base, UTCDateTime, utcnow


class Sealed:
    """The columns of a row that keeps a value sealed: the ciphertext, the id of the key that
    sealed it (``services/access/secret_keys``), who set it and when; a secret and a registry
    login are both such rows."""

    ciphertext: Mapped[str] = mapped_column(Text())  # base64(nonce || AES-GCM ciphertext)
    key_id: Mapped[str] = mapped_column(String(64))
    set_by: Mapped[str] = mapped_column(String(100), default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Secret(Sealed, Base):
    __tablename__ = "secrets"
    __table_args__ = (UniqueConstraint("scope", "owner", "name", name="uq_secrets_scope_owner"),)

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    scope: Mapped[str] = mapped_column(String(10))
    owner: Mapped[str] = mapped_column(String(100), default="")
    name: Mapped[str] = mapped_column(String(128))
