"""The reactions outbox: what a run's change of status sets off, owed until a handler did it.

The status writer inserts a row in the transaction of the transition (``server/reactions.py``
says which), so a reaction exists exactly when its transition does. The leader's reactions loop
(``services/runs/reactions.py``) carries each out and marks it done; a handler that fails is tried
again later (``due_at``, ``tries``, ``last_error``), and a handler is idempotent, so a crash at
any point neither loses nor repeats what it does.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from starforge.server.db.models import Base, UTCDateTime, utcnow


class Reaction(Base):
    __tablename__ = "reactions"
    __table_args__ = (Index("ix_reactions_owed", "done_at", "due_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(32))
    # What the transition was when it happened (status, end reason, exit code, attempt, time):
    # the run may have moved on (an auto-retry queues it again in the same transaction).
    detail: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    due_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    tries: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    done_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    last_error: Mapped[str] = mapped_column(Text, default="", server_default="")
