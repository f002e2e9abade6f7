"""Request and response bodies of the HTTP API under ``/api/v1``, and the log stream's events.

The server's routers and the client's calls both use these models, so the two cannot drift.
Every model is a :class:`~starforge.contract.base.Contract`: the server parses requests strictly
(an unknown field is a 422), the client reads responses and SSE payloads with ``Model.read``, which
ignores fields a newer server added (nested ones too), so an older client talks to a newer server.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from starforge.contract.answering import AnsweredEndReason
from starforge.contract.base import Contract
from starforge.contract.jobspec import JobSpec, Manifest, check_finite
from starforge.contract.profiles import Pool, ProfileDef
from starforge.contract.states import JobStatus, RunnerEndReason
from starforge.contract.wire import API_PREFIX as API_PREFIX
from starforge.contract.wire import CLIENT_VERSION_HEADER as CLIENT_VERSION_HEADER
from starforge.contract.wire import RUN_TOKEN_HEADER as RUN_TOKEN_HEADER

# The release policy (docs/releases.md), checked by tests/integration/test_release_compat.py
# against the previous release built from git: a server answers clients down to
# MIN_CLIENT_VERSION (older ones get a one-line 426 naming the upgrade; an admin may raise the
# bar for users with ``min_client_version``), and a client talks to servers down to
# MIN_SERVER_VERSION. Runners are clients of the same wire, held to MIN_CLIENT_VERSION.
MIN_CLIENT_VERSION = "0.1.0"
MIN_SERVER_VERSION = "0.1.0"

# Bounds of the numbers the API takes, so each fits the database's columns (64-bit steps, 32-bit
# counters) and a value beyond them is a 400 naming the field, never an overflow inside.
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
MAX_COUNT = 1_000_000  # GPUs or runs in a quota
MAX_PRIORITY = 1_000_000  # |priority| of a user's quota
MAX_DIGESTS = 100_000  # digests in one /blobs/missing request
# An exit status as a runner reports it: 0..255, or minus a signal's number (-SIGKILL = -9).
EXIT_CODE_MIN, EXIT_CODE_MAX = -255, 255


class ServerInfo(Contract):
    version: str
    api: str = "v1"
    started_at: datetime
    pid: int
    executor: str
    url: str = ""
    job_user: str = ""  # the user jobs run as; "" for the server's own
    isolation: str = ""  # how jobs are kept apart (or that they are not), said as a rule
    database: str = ""  # the database URL, its password hidden
    leader: bool = True  # whether this process runs the scheduler and reconciler
    registries: str = ""  # the image allowlist in a line ("every registry is allowed" when none)
    containers: str = ""  # the container runtime in effect, in one line
    min_client: str = ""  # the oldest client it lets users call it with ("": a server before 0.2)


class WhoAmI(Contract):
    user: str
    role: str = "member"  # starforge.contract.auth.Role


class MissingBlobsRequest(Contract):
    digests: list[str] = Field(max_length=MAX_DIGESTS)


class MissingBlobsResponse(Contract):
    missing: list[str]


class SubmitRequest(Contract):
    spec: JobSpec
    manifest: Manifest
    idempotency_key: str = Field(min_length=8, max_length=128)
    # Automatic requeues after a platform failure (node lost); None = the method's default.
    max_retries: int | None = Field(default=None, ge=0, le=100)


class SubmitResponse(Contract):
    run_id: str
    status: JobStatus
    created: bool = True  # False when an earlier request with the same key made the run
    message: str = ""
    warnings: list[str] = Field(default_factory=list)
    queue_position: int | None = None


class AttemptView(Contract):
    number: int
    executor_ref: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    exit_code: int | None = None
    end_reason: AnsweredEndReason | None = None
    log_path: str
    resumed_from: str | None = None  # the checkpoint this attempt started from
    heartbeat_at: datetime | None = None  # the latest heartbeat of any of its runners
    # What it held and cost (docs/lab-ops.md): GPUs of its allocation × its own wall time, up
    # to now while it runs; money where the server prices every series it held (else None).
    gpus: int = 0
    gpu_hours: float = 0.0
    cost: float | None = None
    currency: str = ""


class EventView(Contract):
    at: datetime
    src: JobStatus | None
    dst: JobStatus
    reason: str = ""
    actor: str = ""


class PendingView(Contract):
    """Why a queued run waits, in numbers, as the scheduler would decide it now."""

    position: int  # 1-based place in the order the scheduler considers queued runs
    queued: int  # how many runs are queued in all
    blocker: str  # starting | quota | capacity | reserved | never_fits
    message: str  # the blocking constraint in one sentence (also the run's reason)
    detail: str = ""  # the numbers behind it: free GPUs per node and who holds the rest
    blocking_runs: list[str] = Field(default_factory=list)
    next_event: str = ""  # for a run at the head: the earliest event that lets it start
    reserved_nodes: list[str] = Field(default_factory=list)  # nodes kept for this run


class RunView(Contract):
    run_id: str
    user: str
    project: str
    experiment: str
    method: str
    status: JobStatus
    end_reason: AnsweredEndReason | None = None
    exit_code: int | None = None
    reason: str = ""  # why it is in its status now (e.g. why it is still queued)
    profiles: list[str]
    pools: list[Pool] = Field(default_factory=list)
    gpus: int = 0
    image: str = ""  # what the run runs (IMAGE@sha256:... where the server pinned a digest)
    image_source: str = ""  # which rule chose it: flag|framework-default|runtime-registry|catalog
    git_commit: str = ""
    git_dirty: bool = False
    rerun_of: str = ""  # the run this one reruns (`sf job rerun`); "" for a submission
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
    # Placed by StarForge, waiting in the executor (Slurm's pending reason, e.g. "Resources").
    executor_pending: str = ""
    # A training run with ``--then`` steps: each step in order (run_id "" until it exists).
    steps: list[StepView] = Field(default_factory=list)
    step: StepView | None = None  # a step run: which step of which run it is
    gate: GateView | None = None  # an eval step's gate, or a pipeline's (its eval step's)

    # The platform datasets the run reads, as admission resolved them: input -> OWNER/NAME@VERSION.
    datasets: dict[str, str] = Field(default_factory=dict)
    # The sum of its attempts' (a paused run accrues nothing while paused: no attempt runs).
    gpu_hours: float = 0.0
    cost: float | None = None  # None: no price for a series it held (hours only)
    currency: str = ""


class StepView(Contract):
    """One step of a pipeline (``--then``): its action, place and, once it exists, its run."""

    action: str
    position: int
    root_run_id: str = ""
    run_id: str = ""  # "" while the step has not been created (training still going, or short)
    status: JobStatus | None = None
    reason: str = ""


class GateView(Contract):
    """An eval gate (``eval: {gate: ...}``) and, once the eval reported, how it was judged."""

    run_id: str  # the eval step run that judges it
    metric: str
    bound: Literal["min", "max"]  # min: the metric must be at least the threshold; max: at most
    threshold: float
    value: float | None = None  # None until the eval reported it (or it produced none)
    passed: bool | None = None  # None until the eval ran
    reason: str = ""  # the eval's own words, e.g. "gate loss <= 0.001 failed: loss = 2.31"


class ExportRequest(Contract):
    """``sf export``: a standalone export step of a run's checkpoint (a run of its own)."""

    checkpoint_step: int | None = Field(default=None, ge=0, le=INT32_MAX)  # None: the latest
    format: Literal["huggingface"] = "huggingface"
    idempotency_key: str = Field(min_length=8, max_length=128)


class RunList(Contract):
    runs: list[RunView]
    # The next page's ``before`` (the last run's id) when older runs exist; None on the last page.
    next_before: str | None = None


class ActionResult(Contract):
    """The answer to a user action: accepted, or rejected with the reason."""

    accepted: bool
    status: JobStatus
    message: str


class LogChunk(Contract):
    attempt: int
    offset: int  # byte offset of the next chunk in this node's log of the attempt
    data: str
    final: bool  # the run ended and every byte of this node's log of its last attempt was sent
    status: JobStatus
    attempts: int = 1
    node: int = 0  # whose log this is (a server from before multi-node logs sent node 0's)
    nodes: int = 1  # how many nodes the attempt has (each has its own log)


class LifecycleEvent(Contract):
    """What a runner reports about its attempt."""

    attempt: int = Field(ge=1, le=INT32_MAX)
    node_rank: int = Field(default=0, ge=0, le=INT32_MAX)
    # ``heartbeat`` changes no status; a heartbeat that is not accepted tells the runner that
    # its attempt is over (the control plane decided so), and the runner stops its training.
    event: Literal["starting", "running", "exited", "heartbeat"]
    exit_code: int | None = Field(default=None, ge=EXIT_CODE_MIN, le=EXIT_CODE_MAX)
    end_reason: RunnerEndReason | None = None
    message: str = ""


class LifecycleAck(Contract):
    """The answer to a runner's lifecycle event."""

    accepted: bool = True  # False for a duplicate or stale event, which changes nothing
    message: str = ""


MAX_LIFECYCLE_BATCH = 16


class LifecycleBatch(Contract):
    """Several events of one runner in the order they happened (``starting`` and ``running`` of
    a quick start): applied in one transaction, each exactly as if it came alone."""

    events: list[LifecycleEvent] = Field(min_length=1, max_length=MAX_LIFECYCLE_BATCH)


class LifecycleBatchAck(Contract):
    """One answer per event of a :class:`LifecycleBatch`, in its order."""

    acks: list[LifecycleAck]


class Health(Contract):
    ok: bool = False


class ProfilesResponse(Contract):
    profiles: list[ProfileDef]
    # Whether jobs run with HF_HUB_OFFLINE (shown by --dry-run); an older server did not say.
    hf_offline: bool = True


# ---- observability: metrics ingest (run token) and queries (user token) ------------------------


class MetricStep(Contract):
    """Values logged at one step of a run (keys already flattened with ``/``)."""

    step: int = Field(ge=0, le=INT64_MAX)
    # wall-clock time of the log call, seconds since the epoch (NaN/inf refused: it is stored)
    t: float = Field(default=0.0, allow_inf_nan=False)
    values: dict[str, float]


class IngestRequest(Contract):
    """What ``starforge.report`` sends: metric steps, hyperparameters and run metadata."""

    attempt: int = Field(default=1, ge=1, le=INT32_MAX)
    steps: list[MetricStep] = Field(default_factory=list)
    hparams: dict[str, Any] | None = None  # merged into the run's stored hyperparameters
    meta: dict[str, Any] | None = None  # merged into the run's metadata

    @field_validator("hparams", "meta")
    @classmethod
    def _finite(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        return check_finite(v)


class IngestAck(Contract):
    stored: int  # points written (a (key, step) already there was replaced: last write wins)
    dropped: int = 0  # points refused (non-finite value, empty or overlong key)


class MetricSeries(Contract):
    key: str
    steps: list[int]
    values: list[float]
    count: int  # points stored for this key (before downsampling)
    last_step: int
    last_value: float
    downsampled: bool = False


class MetricsView(Contract):
    run_id: str
    keys: list[str]  # every metric key the run has
    series: list[MetricSeries]


class RunMetaView(Contract):
    """Hyperparameters and metadata the job reported, and how far its metrics went."""

    run_id: str
    hparams: dict[str, Any] = Field(default_factory=dict)
    meta: dict[str, Any] = Field(default_factory=dict)
    last_step: int | None = None
    updated_at: datetime | None = None


class RunProgress(Contract):
    run_id: str
    last_step: int | None = None
    updated_at: datetime | None = None


class ProgressList(Contract):
    runs: list[RunProgress]


class ArtifactEntry(Contract):
    path: str  # relative to the run's output folder
    size: int
    modified: datetime


class ArtifactList(Contract):
    run_id: str
    root: str
    files: list[ArtifactEntry]
    truncated: bool = False


# ---- Server-Sent Events of ``GET /runs/{ref}/logs/stream`` --------------------------------------
# Each event's ``id`` is the position after it, ``<attempt>:<byte offset>[,<offset of node 1>…]``
# (one offset per node; contract.logcursor), so a client that reconnects with ``Last-Event-ID``
# resumes exactly there. Its ``data`` is the JSON of the model named below.

SSE_LOG = "log"  # StreamLog
SSE_ATTEMPT = "attempt"  # StreamAttempt: a new attempt's log starts
SSE_STATUS = "status"  # StreamStatus
SSE_END = "end"  # StreamEnd: the run ended, all bytes sent


class StreamLog(Contract):
    """Whole lines of one node's log of an attempt (a line longer than one event is cut); a
    node r > 0's lines come labelled ``[node r]`` unless the stream follows that node alone."""

    attempt: int
    text: str
    node: int = 0


class StreamAttempt(Contract):
    """A retry or resume started a new attempt; its log follows from its beginning."""

    attempt: int


class StreamStatus(Contract):
    """The run's status, sent first and again whenever it changes."""

    status: JobStatus
    reason: str = ""
    attempts: int = 0  # attempts so far (0: the run has not started yet)


class StreamEnd(Contract):
    """The run is final and every byte of its last attempt was sent; the stream closes."""

    status: JobStatus
    end_reason: AnsweredEndReason | None = None
    exit_code: int | None = None


StreamPayload = StreamLog | StreamAttempt | StreamStatus | StreamEnd
STREAM_PAYLOADS: dict[str, type[StreamPayload]] = {
    SSE_LOG: StreamLog,
    SSE_ATTEMPT: StreamAttempt,
    SSE_STATUS: StreamStatus,
    SSE_END: StreamEnd,
}


def read_stream_event(event: str, data: str) -> StreamPayload | None:
    """The typed payload of one log-stream event; None for an event this version does not know
    (a newer server may send more kinds, which an older client skips)."""
    model = STREAM_PAYLOADS.get(event)
    return model.read(data) if model is not None else None


# ---- resources: quotas, usage, cluster capacity ------------------------------------------------


Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
ProfileName = Annotated[str, Field(min_length=1, max_length=128)]


class Quota(Contract):
    """A user's limits: None lifts a limit; ``allowed_profiles`` None allows every profile."""

    max_gpus: int | None = Field(default=None, ge=0, le=MAX_COUNT)  # GPUs in use at once
    max_gpus_per_series: dict[str, Count] = Field(default_factory=dict)  # e.g. {"h200": 8}
    max_runs: int | None = Field(default=None, ge=0, le=MAX_COUNT)  # runs holding resources
    allowed_profiles: list[ProfileName] | None = None
    priority: int = Field(default=0, ge=-MAX_PRIORITY, le=MAX_PRIORITY)  # higher goes first


class QuotaUpdate(Contract):
    """``PUT /admin/quotas/{user}``: only the fields sent change; ``null`` lifts a limit.

    ``max_gpus_per_series`` merges into the current map (a ``null`` value removes that series'
    limit); ``reset`` starts from the server's defaults before applying the rest.
    """

    reset: bool = False
    max_gpus: int | None = Field(default=None, ge=0, le=MAX_COUNT)
    max_gpus_per_series: dict[str, Count | None] = Field(default_factory=dict)
    max_runs: int | None = Field(default=None, ge=0, le=MAX_COUNT)
    allowed_profiles: list[ProfileName] | None = None
    priority: int | None = Field(default=None, ge=-MAX_PRIORITY, le=MAX_PRIORITY)


class Usage(Contract):
    gpus: int = 0
    gpus_by_series: dict[str, int] = Field(default_factory=dict)
    runs: int = 0  # runs holding resources
    queued: int = 0


class UserQuota(Contract):
    user: str
    role: str = "member"
    quota: Quota
    default: bool = True  # no quota of its own: the server's defaults apply
    usage: Usage = Field(default_factory=Usage)


class QuotaList(Contract):
    users: list[UserQuota]


class RunBrief(Contract):
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
    paused: list[RunBrief] = Field(default_factory=list)  # hold no GPUs; resume re-queues them


class SeriesCapacity(Contract):
    series: str
    nodes: int
    total: int
    used: int
    free: int


class NodeCapacity(Contract):
    name: str
    series: str
    gpus: int
    used: int
    free: int
    runs: list[str] = Field(default_factory=list)


class ClusterStatus(Contract):
    executor: str
    profiles: list[ProfileDef]
    series: list[SeriesCapacity]
    nodes: list[NodeCapacity]
    queued: int = 0
    active: int = 0
    # Why the executor's capacity cannot be read now (Slurm's controller does not answer); "" when
    # it can. The series and nodes are then the last ones known, and nothing is placed meanwhile.
    unreachable: str = ""


# ---- the control plane's beacon: where runners find the server after it restarts ---------------
# (the file: contract.layout.StorageLayout.beacon)


class ControlPlane(Contract):
    """What a starting server publishes for runners (its URL changes with each start)."""

    url: str
    heartbeat_s: float = 5.0
    report_drain_s: float = 60.0  # how long a runner sends its job's spooled curves at the end
    pid: int = 0
    started_at: datetime | None = None
