"""The leadership term: one row whose ``epoch`` each newly elected leader increments
(``server/fence.py``); a pass's transaction that carries an older epoch is refused."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from starforge.server.db.models import Base, UTCDateTime, utcnow


class Leadership(Base):
    __tablename__ = "leadership"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    epoch: Mapped[int] = mapped_column(Integer, default=0)
    holder: Mapped[str] = mapped_column(String(200), default="")
    since: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
