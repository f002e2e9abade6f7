"""Tables of sweeps and preemption.

``sweeps`` holds one row per ``sf sweep``: its grid and early-stopping rule (ASHA), unique per
(user, idempotency key) so a resent request makes no second sweep. ``sweep_runs`` ties each
variant (a normal run) to its sweep with its parameters; ``note`` keeps why the sweep stopped it,
so the run's reason still says so once its runners have exited. ``preemptions`` records every
preemption (who took the GPUs, at which priority, when): it keeps a run from being preempted
twice within ``preempt_min_interval_s`` and says which paused runs the scheduler requeues.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from starforge.server.db.models import Base, UTCDateTime, utcnow


class Sweep(Base):
    __tablename__ = "sweeps"
    __table_args__ = (UniqueConstraint("user", "idempotency_key", name="uq_sweeps_user_idem"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user: Mapped[str] = mapped_column(String(100), index=True)
    project: Mapped[str] = mapped_column(String(100))
    experiment: Mapped[str] = mapped_column(String(100))
    idempotency_key: Mapped[str] = mapped_column(String(128))
    grid: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # contract.sweeps.EarlyStop as data; SQL NULL without early stopping
    early_stop: Mapped[dict[str, Any] | None] = mapped_column(
        JSON(none_as_null=True), nullable=True
    )
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class SweepRun(Base):
    __tablename__ = "sweep_runs"

    sweep_id: Mapped[str] = mapped_column(
        ForeignKey("sweeps.id", ondelete="CASCADE"), primary_key=True
    )
    # Indexed: a run's report asks, at each new step, whether it is a variant with rungs.
    run_id: Mapped[str] = mapped_column(
        ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    index: Mapped[int] = mapped_column(Integer)
    params: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    stopped_rung: Mapped[int | None] = mapped_column(Integer, nullable=True)
    note: Mapped[str] = mapped_column(Text, default="")


class Preemption(Base):
    __tablename__ = "preemptions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    by_run: Mapped[str] = mapped_column(String(32))
    by_priority: Mapped[int] = mapped_column(Integer)
    at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    requeued: Mapped[bool] = mapped_column(Boolean, default=False)
