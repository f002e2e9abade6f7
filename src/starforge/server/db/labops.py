"""Running a lab: daily GPU-hour quotas, the maintenance drain, and webhook notifications.

* ``daily_gpu_quotas``: a user's GPU-hours per UTC day an admin set (else the server's
  ``daily_gpu_hours`` default; none: no daily limit).
* ``usage_summaries``: GPU-hours of ended attempts per (UTC day, user, project, series), added to
  in the transaction that ends an attempt (``services/scheduling/accounting.attempt_ended``), so
  reading a year of usage reads one row per day and user and project, not every attempt. An attempt
  still running is not in it: readers add it from the attempt's own start up to now.
* ``maintenance`` (one row, id 1) and ``maintenance_paused`` (the runs a drain paused, in the
  order it found them): kept in the database so a drain survives a server restart.
* ``notify_endpoints`` (a user's webhook URLs; the HMAC secret, sealed at rest, is kept to sign
  and never returned),
  ``notify_outbox`` (one row per delivery owed, written in the transaction of the terminal status
  change) and ``notify_deliveries`` (every try, for ``sf notify log``).
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from sqlalchemy import JSON, Boolean, Date, Float, ForeignKey, Integer, String, Text
from sqlalchemy import false as sa_false
from sqlalchemy.orm import Mapped, mapped_column

from starforge.server.db.models import Base, UTCDateTime, utcnow


class DailyGpuQuota(Base):
    """``sf admin usage quota USER HOURS``: GPU-hours a user may use per UTC day."""

    __tablename__ = "daily_gpu_quotas"

    user: Mapped[str] = mapped_column(String(100), primary_key=True)
    gpu_hours: Mapped[float | None] = mapped_column(Float, nullable=True)  # None: no limit
    set_by: Mapped[str] = mapped_column(String(100), default="")
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class UsageSummary(Base):
    """GPU-hours the ended attempts of ``user``'s runs in ``project`` held on GPUs of ``series``
    during UTC ``day`` (each attempt split at midnight)."""

    __tablename__ = "usage_summaries"

    day: Mapped[date] = mapped_column(Date, primary_key=True)
    user: Mapped[str] = mapped_column(String(100), primary_key=True)
    project: Mapped[str] = mapped_column(String(100), primary_key=True)
    series: Mapped[str] = mapped_column(String(100), primary_key=True)
    gpu_hours: Mapped[float] = mapped_column(Float, default=0.0)


class Maintenance(Base):
    """The drain flag: while ``active`` the scheduler starts nothing (submissions still queue)."""

    __tablename__ = "maintenance"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)  # always 1
    active: Mapped[bool] = mapped_column(Boolean, default=False, server_default=sa_false())
    note: Mapped[str] = mapped_column(Text, default="")
    started_by: Mapped[str] = mapped_column(String(100), default="")
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class MaintenancePaused(Base):
    """A run the drain paused; ``resume`` requeues these in ``seq`` order."""

    __tablename__ = "maintenance_paused"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    paused_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class NotifyEndpoint(Base):
    """A user's webhook: where to POST, on which terminal statuses, for which project."""

    __tablename__ = "notify_endpoints"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user: Mapped[str] = mapped_column(String(100), index=True)
    url: Mapped[str] = mapped_column(String(2048))
    events: Mapped[list[str]] = mapped_column(JSON)
    project: Mapped[str | None] = mapped_column(String(100), nullable=True)
    # The HMAC secret that signs payloads, sealed like a secret (``services/access/secret_keys``,
    # bound to ``webhook/USER/ID``): base64(nonce || AES-GCM ciphertext) and the key's id. Never
    # sent back. ``key_id`` "": a row from before migration 0021, still in the clear until the
    # leader's notify pass seals it.
    ciphertext: Mapped[str] = mapped_column(Text())
    key_id: Mapped[str] = mapped_column(String(64), default="", server_default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class NotifyOutbox(Base):
    """One payload owed to one endpoint; delivered (or given up) by the leader's notify loop."""

    __tablename__ = "notify_outbox"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    endpoint_id: Mapped[str] = mapped_column(
        ForeignKey("notify_endpoints.id", ondelete="CASCADE"), index=True
    )
    run_id: Mapped[str] = mapped_column(String(32))
    event: Mapped[str] = mapped_column(String(40))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    tries: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    next_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, index=True)
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    gave_up_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class NotifyDelivery(Base):
    """One try of one outbox row: the HTTP status or the error."""

    __tablename__ = "notify_deliveries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    outbox_id: Mapped[int] = mapped_column(
        ForeignKey("notify_outbox.id", ondelete="CASCADE"), index=True
    )
    endpoint_id: Mapped[str] = mapped_column(String(32), index=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    status_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    ok: Mapped[bool] = mapped_column(Boolean, default=False)
    error: Mapped[str] = mapped_column(Text, default="")


def drain_note(conn: Any) -> str | None:
    """While a maintenance drain is on, why nothing starts (the scheduler's guard); else None."""
    from sqlalchemy import select

    row = conn.execute(select(Maintenance.active, Maintenance.note).where(Maintenance.id == 1))
    found = row.first()
    if found is None or not found[0]:
        return None
    note = f" ({found[1]})" if found[1] else ""
    return f"maintenance{note}: the scheduler starts no run until an admin resumes"
