"""What crosses the wire for running a lab: GPU-hour usage, the maintenance drain, webhooks.

GPU-hours of an attempt are its GPUs × (end − start) of its own recorded times (a running
attempt counts up to now), split across days at UTC midnight. A webhook's secret appears in
exactly one response, :class:`EndpointCreated`; every other view of an endpoint omits it.
"""

from __future__ import annotations

from datetime import date, datetime

from pydantic import Field

from starforge.contract.base import Contract

NOTIFY_EVENTS = ("succeeded", "failed", "stopped")  # the terminal statuses a webhook may follow
SIGNATURE_HEADER = "X-StarForge-Signature"  # "sha256=" + HMAC-SHA256(secret, f"{ts}.{body}")
TIMESTAMP_HEADER = "X-StarForge-Timestamp"  # unix seconds; receivers refuse old ones (replay)
DELIVERY_HEADER = "X-StarForge-Delivery"  # the outbox id: the same on every retry (dedupe)
EVENT_HEADER = "X-StarForge-Event"


# ---- accounting ----------------------------------------------------------------------------


class UsageRow(Contract):
    """GPU-hours of one (user, project, day), or of one run (``--by run``: its user, project and
    experiment too); a field is "" when the report groups it away. ``cost``: the hours priced
    by the server's ``gpu_hour_prices`` (None where a series it counts has no price)."""

    user: str = ""
    project: str = ""
    day: date | None = None
    run_id: str = ""
    experiment: str = ""
    gpu_hours: float
    cost: float | None = None


class UsageReport(Contract):
    by: str  # "day" (user, project and day), "user", "project" or "run"
    since: date | None = None
    rows: list[UsageRow] = Field(default_factory=list)
    total_gpu_hours: float = 0.0
    total_cost: float | None = None
    currency: str = ""  # of every cost in the report ("" when none is priced)


class MyGpuHours(Contract):
    """``sf status``: the caller's GPU-hours today (UTC) and in total, and the daily quota."""

    user: str
    today: float
    total: float
    daily_quota: float | None = None  # None: no daily limit


class DailyQuotaUpdate(Contract):
    gpu_hours: float | None = Field(default=None, ge=0)  # None: no daily limit


# ---- maintenance ---------------------------------------------------------------------------


class DrainRequest(Contract):
    note: str = Field(default="", max_length=2000)


class Blocker(Contract):
    run_id: str
    user: str
    status: str
    why: str


class MaintenanceStatus(Contract):
    active: bool
    note: str = ""
    started_by: str = ""
    started_at: datetime | None = None
    paused: list[str] = Field(default_factory=list)  # runs the drain paused, in resume order
    pausing: list[str] = Field(default_factory=list)  # of those, still saving a checkpoint
    blockers: list[Blocker] = Field(default_factory=list)  # active runs that cannot resume
    # why the executor could not say what it still runs (Slurm not answering): then not safe
    executor_unknown: str = ""
    safe_to_restart: bool = False
    message: str = ""


# ---- notifications ---------------------------------------------------------------------------


class EndpointCreate(Contract):
    url: str = Field(max_length=2048)
    events: list[str] = Field(default_factory=lambda: list(NOTIFY_EVENTS))
    project: str | None = Field(default=None, max_length=100)


class EndpointView(Contract):
    id: str
    url: str
    events: list[str]
    project: str | None = None
    created_at: datetime
    delivered: int = 0
    failing: int = 0  # payloads owed that failed at least once and are not delivered yet


class EndpointCreated(EndpointView):
    secret: str  # shown once: sign-checking needs it, the server never returns it again


class EndpointList(Contract):
    endpoints: list[EndpointView] = Field(default_factory=list)


class EndpointRemoved(Contract):
    id: str
    removed: bool


class DeliveryView(Contract):
    endpoint_id: str
    outbox_id: int
    run_id: str
    event: str
    at: datetime
    ok: bool
    status_code: int | None = None
    error: str = ""


class DeliveryLog(Contract):
    deliveries: list[DeliveryView] = Field(default_factory=list)
