"""Tables of resources: per-user quotas (the limits an admin set for one user).

``quotas`` holds one row per user who has limits of their own; a user without a row gets the
server's defaults (``quota_defaults`` in the settings), so changing the defaults changes every
such user at once. A row is complete (it never stores a difference from the defaults), so a user
with a row keeps exactly what the admin set even when the defaults change. JSON columns are text,
parsed by :mod:`starforge.server.services.quotas`, like the rest of the schema.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from starforge.server.db.models import Base, UTCDateTime, utcnow


class QuotaRow(Base):
    __tablename__ = "quotas"

    user: Mapped[str] = mapped_column(String(100), primary_key=True)
    max_gpus: Mapped[int | None] = mapped_column(Integer, nullable=True)
    max_gpus_per_series_json: Mapped[str] = mapped_column(Text, default="{}")
    max_runs: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # null: every profile of the registry; else a JSON list of profile names
    allowed_profiles_json: Mapped[str | None] = mapped_column(Text, nullable=True)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_by: Mapped[str] = mapped_column(String(100), default="")
