"""Tables of run observability: metric points and each run's reported hyperparameters/metadata.

``metric_points`` holds one row per (run, key, step): a value logged again for the same step
replaces the old one (last write wins), so a resumed run that re-logs the steps after its last
checkpoint leaves one continuous series. ``run_meta`` holds one row per run with the merged
hyperparameters and metadata the job reported, and the highest step it logged (what run lists
show without scanning the points). Both rows go when their run goes (``ON DELETE CASCADE``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import JSON, Float, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from starforge.server.db.models import Base, UTCDateTime, utcnow

MAX_KEY_LENGTH = 200


class MetricPoint(Base):
    __tablename__ = "metric_points"
    # On SQLite the primary key is the table (one B-tree instead of a table and an index): about a
    # third less work per stored point.
    __table_args__: ClassVar[dict[str, Any]] = {"sqlite_with_rowid": False}

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    key: Mapped[str] = mapped_column(String(MAX_KEY_LENGTH), primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    value: Mapped[float] = mapped_column(Float)
    at: Mapped[float] = mapped_column(Float)  # the job's wall clock when logged (epoch seconds)


class RunMeta(Base):
    __tablename__ = "run_meta"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    hparams: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    meta: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    last_step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
