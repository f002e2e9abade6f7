"""Request and response bodies of the HTTP API under ``/api/v1``.

The server's routers and the client's calls both use these models, so the two cannot drift.
Reads are lenient (``extra="ignore"``) so an older client can talk to a newer server.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from starforge.contract.jobspec import JobSpec, Manifest
from starforge.contract.profiles import Pool, ProfileDef
from starforge.contract.states import EndReason, JobStatus

API_PREFIX = "/api/v1"
CLIENT_VERSION_HEADER = "X-StarForge-Client"
RUN_TOKEN_HEADER = "X-StarForge-Run-Token"
MIN_CLIENT_VERSION = "0.1.0"


class Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ServerInfo(Lenient):
    version: str
    api: str = "v1"
    started_at: datetime
    pid: int
    executor: str
    url: str = ""


class WhoAmI(Lenient):
    user: str


class MissingBlobsRequest(Strict):
    digests: list[str]


class MissingBlobsResponse(Lenient):
    missing: list[str]


class SubmitRequest(Strict):
    spec: JobSpec
    manifest: Manifest
    idempotency_key: str = Field(min_length=8, max_length=128)
    # Automatic requeues after a platform failure (node lost); None = the method's default.
    max_retries: int | None = Field(default=None, ge=0, le=100)


class SubmitResponse(Lenient):
    run_id: str
    status: JobStatus
    created: bool = True  # False when an earlier request with the same key made the run
    message: str = ""
    warnings: list[str] = Field(default_factory=list)
    queue_position: int | None = None


class AttemptView(Lenient):
    number: int
    executor_ref: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    exit_code: int | None = None
    end_reason: EndReason | None = None
    log_path: str
    resumed_from: str | None = None  # the checkpoint this attempt started from
    heartbeat_at: datetime | None = None  # the latest heartbeat of any of its runners


class EventView(Lenient):
    at: datetime
    src: JobStatus | None
    dst: JobStatus
    reason: str = ""
    actor: str = ""


class PendingView(Lenient):
    """Why a queued run waits, in numbers, as the scheduler would decide it now."""

    position: int  # 1-based place in the order the scheduler considers queued runs
    queued: int  # how many runs are queued in all
    blocker: str  # starting | quota | capacity | reserved | never_fits
    message: str  # the blocking constraint in one sentence (also the run's reason)
    detail: str = ""  # the numbers behind it: free GPUs per node and who holds the rest
    blocking_runs: list[str] = Field(default_factory=list)
    next_event: str = ""  # for a run at the head: the earliest event that lets it start
    reserved_nodes: list[str] = Field(default_factory=list)  # nodes kept for this run


class RunView(Lenient):
    run_id: str
    user: str
    project: str
    experiment: str
    method: str
    status: JobStatus
    end_reason: EndReason | None = None
    exit_code: int | None = None
    reason: str = ""  # why it is in its status now (e.g. why it is still queued)
    profiles: list[str]
    pools: list[Pool] = Field(default_factory=list)
    gpus: int = 0
    git_commit: str = ""
    git_dirty: bool = False
    created_at: datetime
    started_at: datetime | None = None
    ended_at: datetime | None = None
    run_dir: str = ""
    attempts: list[AttemptView] = Field(default_factory=list)
    events: list[EventView] = Field(default_factory=list)
    spec: JobSpec | None = None
    auto_retries: int = 0  # automatic requeues since the last user action
    max_retries: int | None = None  # the run's auto-retry limit (None: the method's default)
    queue_position: int | None = None  # queued runs only
    pending: PendingView | None = None  # queued runs only: why it waits


class RunList(Lenient):
    runs: list[RunView]


class ActionResult(Lenient):
    """The answer to a user action: accepted, or rejected with the reason."""

    accepted: bool
    status: JobStatus
    message: str


class LogChunk(Lenient):
    attempt: int
    offset: int  # byte offset of the next chunk in this attempt's log
    data: str
    final: bool  # the run ended and every byte of its last attempt has been sent
    status: JobStatus
    attempts: int = 1


class LifecycleEvent(Strict):
    """What a runner reports about its attempt."""

    attempt: int = Field(ge=1)
    node_rank: int = Field(default=0, ge=0)
    # ``heartbeat`` changes no status; a heartbeat that is not accepted tells the runner that
    # its attempt is over (the control plane decided so), and the runner stops its training.
    event: Literal["starting", "running", "exited", "heartbeat"]
    exit_code: int | None = None
    end_reason: EndReason | None = None
    message: str = ""


class ProfilesResponse(Lenient):
    profiles: list[ProfileDef]


# ---- observability: metrics ingest (run token) and queries (user token) ------------------------


class MetricStep(Strict):
    """Values logged at one step of a run (keys already flattened with ``/``)."""

    step: int = Field(ge=0)
    t: float = 0.0  # wall-clock time of the log call, seconds since the epoch
    values: dict[str, float]


class IngestRequest(Strict):
    """What ``starforge.report`` sends: metric steps, hyperparameters and run metadata."""

    attempt: int = Field(default=1, ge=1)
    steps: list[MetricStep] = Field(default_factory=list)
    hparams: dict[str, Any] | None = None  # merged into the run's stored hyperparameters
    meta: dict[str, Any] | None = None  # merged into the run's metadata


class IngestAck(Lenient):
    stored: int  # points written (a (key, step) already there was replaced: last write wins)
    dropped: int = 0  # points refused (non-finite value, empty or overlong key)


class MetricSeries(Lenient):
    key: str
    steps: list[int]
    values: list[float]
    count: int  # points stored for this key (before downsampling)
    last_step: int
    last_value: float
    downsampled: bool = False


class MetricsView(Lenient):
    run_id: str
    keys: list[str]  # every metric key the run has
    series: list[MetricSeries]


class RunMetaView(Lenient):
    """Hyperparameters and metadata the job reported, and how far its metrics went."""

    run_id: str
    hparams: dict[str, Any] = Field(default_factory=dict)
    meta: dict[str, Any] = Field(default_factory=dict)
    last_step: int | None = None
    updated_at: datetime | None = None


class RunProgress(Lenient):
    run_id: str
    last_step: int | None = None
    updated_at: datetime | None = None


class ProgressList(Lenient):
    runs: list[RunProgress]


class ArtifactEntry(Lenient):
    path: str  # relative to the run's output folder
    size: int
    modified: datetime


class ArtifactList(Lenient):
    run_id: str
    root: str
    files: list[ArtifactEntry]
    truncated: bool = False


# Server-Sent Events of ``GET /runs/{ref}/logs/stream``: ``id`` is ``<attempt>:<byte offset>``
# after the event, so a client that reconnects with ``Last-Event-ID`` resumes exactly there.
SSE_LOG = "log"  # data: {"attempt", "text"}
SSE_ATTEMPT = "attempt"  # data: {"attempt"}: a new attempt's log starts
SSE_STATUS = "status"  # data: {"status", "reason", "attempts"}
SSE_END = "end"  # data: {"status", "end_reason", "exit_code"}: the run ended, all bytes sent


# ---- resources: quotas, usage, cluster capacity ------------------------------------------------


class Quota(Lenient):
    """A user's limits: None lifts a limit; ``allowed_profiles`` None allows every profile."""

    max_gpus: int | None = Field(default=None, ge=0)  # GPUs in use at once, all series
    max_gpus_per_series: dict[str, int] = Field(default_factory=dict)  # e.g. {"h200": 8}
    max_runs: int | None = Field(default=None, ge=0)  # runs holding resources at once
    allowed_profiles: list[str] | None = None
    priority: int = 0  # higher goes first in the queue


class QuotaUpdate(Strict):
    """``PUT /admin/quotas/{user}``: only the fields sent change; ``null`` lifts a limit.

    ``max_gpus_per_series`` merges into the current map (a ``null`` value removes that series'
    limit); ``reset`` starts from the server's defaults before applying the rest.
    """

    reset: bool = False
    max_gpus: int | None = Field(default=None, ge=0)
    max_gpus_per_series: dict[str, int | None] = Field(default_factory=dict)
    max_runs: int | None = Field(default=None, ge=0)
    allowed_profiles: list[str] | None = None
    priority: int | None = None


class Usage(Lenient):
    gpus: int = 0
    gpus_by_series: dict[str, int] = Field(default_factory=dict)
    runs: int = 0  # runs holding resources
    queued: int = 0


class UserQuota(Lenient):
    user: str
    role: str = "user"
    quota: Quota
    default: bool = True  # no quota of its own: the server's defaults apply
    usage: Usage = Field(default_factory=Usage)


class QuotaList(Lenient):
    users: list[UserQuota]


class RunBrief(Lenient):
    run_id: str
    experiment: str  # project/experiment
    status: JobStatus
    gpus: int = 0
    profiles: list[str] = Field(default_factory=list)
    nodes: list[str] = Field(default_factory=list)  # where it runs (active runs)
    queue_position: int | None = None
    reason: str = ""


class MyUsage(UserQuota):
    active: list[RunBrief] = Field(default_factory=list)
    queued_runs: list[RunBrief] = Field(default_factory=list)


class SeriesCapacity(Lenient):
    series: str
    nodes: int
    total: int
    used: int
    free: int


class NodeCapacity(Lenient):
    name: str
    series: str
    gpus: int
    used: int
    free: int
    runs: list[str] = Field(default_factory=list)


class ClusterStatus(Lenient):
    executor: str
    profiles: list[ProfileDef]
    series: list[SeriesCapacity]
    nodes: list[NodeCapacity]
    queued: int = 0
    active: int = 0


# ---- the control plane's beacon: where runners find the server after it restarts ---------------

CONTROL_PLANE_FILE = "control-plane.json"  # at the storage root, rewritten by each server start


class ControlPlane(Lenient):
    """What a starting server publishes for runners (its URL changes with each start)."""

    url: str
    heartbeat_s: float = 5.0
    pid: int = 0
    started_at: datetime | None = None


# ---- the log stream's events (SSE payloads; their event names are the SSE_* constants) ----------


class LogEvent(Lenient):
    """``log``: whole lines of one attempt's log (a line longer than an event is cut)."""

    attempt: int
    text: str


class AttemptEvent(Lenient):
    """``attempt``: a new attempt's log starts (after a retry or resume)."""

    attempt: int


class StatusEvent(Lenient):
    """``status``: the run's status, first and whenever it changes."""

    status: JobStatus
    reason: str = ""
    attempts: int = 0


class EndEvent(Lenient):
    """``end``: the run is final and every byte of its last attempt was sent."""

    status: JobStatus
    end_reason: EndReason | None = None
    exit_code: int | None = None
