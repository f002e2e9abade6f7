"""Request and response bodies of the HTTP API under ``/api/v1``.

The server's routers and the client's calls both use these models, so the two cannot drift.
Reads are lenient (``extra="ignore"``) so an older client can talk to a newer server.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

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


class EventView(Lenient):
    at: datetime
    src: JobStatus | None
    dst: JobStatus
    reason: str = ""
    actor: str = ""


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
    event: Literal["starting", "running", "exited"]
    exit_code: int | None = None
    end_reason: EndReason | None = None
    message: str = ""


class ProfilesResponse(Lenient):
    profiles: list[ProfileDef]
