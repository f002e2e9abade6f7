"""ORM models of the control plane's database.

Tables: ``users`` (who may call the API, with a role), ``api_tokens`` (their tokens, as sha256
digests), ``runs`` (one row per submission, stable for life),
``attempts`` (one row per placement of a run: where it ran, how it ended) and ``events`` (every
status change, append-only). Only :mod:`starforge.server.statemachine` writes ``runs.status``.

Structured values (a run's spec, manifest and pools; an attempt's allocation and node records) are
SQLAlchemy ``JSON`` columns, which SQLite and PostgreSQL both keep. An attempt's node records are
the one JSON value changed in place, so that column tracks mutation (``MutableDict``): a record
replaced under its rank is saved with the transaction. Node records are written only by
:func:`starforge.server.statemachine.node_event` and read typed through
:meth:`Attempt.node_records`. Timestamps are stored as naive UTC and read back as aware UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy import false as sa_false
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.mutable import MutableDict
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from starforge.contract.nodes import NodeRecord


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp that is always aware UTC in Python, whatever the database keeps."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetimes are not stored; use datetime.now(UTC)")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    pass


class User(Base):
    __tablename__ = "users"
    __table_args__ = (UniqueConstraint("unix_user", name="uq_users_unix_user"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    # viewer | member | operator | admin (starforge.contract.auth.Role); the embedded server's
    # local user is an admin
    role: Mapped[str] = mapped_column(String(20), default="member", server_default="member")
    # a disabled user's tokens are refused; its runs and history stay
    disabled: Mapped[bool] = mapped_column(Boolean, default=False, server_default=sa_false())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # The Unix account the user's jobs run under on a Slurm server (submitted as it, their run
    # folders its own); None: unmapped, and on a Slurm server of several users a member's runs
    # are refused until an admin maps it (`sf admin user set-unix`). One account per user.
    unix_user: Mapped[str | None] = mapped_column(String(32), nullable=True)
    tokens: Mapped[list[Token]] = relationship(
        back_populates="owner", cascade="all, delete-orphan", order_by="Token.id"
    )


class Token(Base):
    """An API token of a user: only its sha256 is kept; it is shown once, when created."""

    __tablename__ = "api_tokens"
    __table_args__ = (UniqueConstraint("user_id", "name", name="uq_api_tokens_user_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    # "api": what the user's role allows; "console": a console link's, which only reads
    scope: Mapped[str] = mapped_column(String(20), default="api", server_default="api")
    owner: Mapped[User] = relationship(back_populates="tokens")


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (
        UniqueConstraint("user", "idempotency_key", name="uq_runs_user_idem"),
        # The queue's order: a submit's place is a COUNT over index entries alone (0020).
        Index("ix_runs_queue_order", "status", "priority", "created_at", "id"),
        # Listings newest first, one per filter, each paged by keyset on (created_at, id) (0026).
        Index("ix_runs_user_created", "user", "created_at", "id"),
        Index("ix_runs_user_status_created", "user", "status", "created_at", "id"),
        Index("ix_runs_created", "created_at", "id"),
        Index("ix_runs_status_created", "status", "created_at", "id"),
        Index("ix_runs_project_created", "project", "created_at", "id"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user: Mapped[str] = mapped_column(String(100))
    project: Mapped[str] = mapped_column(String(100))
    experiment: Mapped[str] = mapped_column(String(100))
    method: Mapped[str] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(20))
    end_reason: Mapped[str | None] = mapped_column(String(40), nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    priority: Mapped[int] = mapped_column(Integer, default=0)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)  # the JobSpec as submitted
    manifest: Mapped[dict[str, Any]] = mapped_column(JSON)  # the package's files
    pools: Mapped[list[dict[str, Any]]] = mapped_column(JSON)  # the admitted pools (Pool)
    # The experiment's config as admission composed it (parameters applied), for the runner;
    # NULL for a run admitted before it was kept (the runner composes it then).
    config: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), nullable=True)
    gpus: Mapped[int] = mapped_column(Integer, default=0)
    # The image admission chose (pinned to a digest where the server resolved one) and the rule
    # that chose it (contract.images.ImageSource); "" for a run without an image.
    image: Mapped[str] = mapped_column(String(1200), default="", server_default="")
    image_source: Mapped[str] = mapped_column(String(40), default="", server_default="")
    # The run this one reruns (`sf job rerun`: its package, parameters, image and datasets as
    # recorded); "" for a run submitted from a lab.
    rerun_of: Mapped[str] = mapped_column(String(32), default="", server_default="")
    idempotency_key: Mapped[str] = mapped_column(String(128))
    run_token_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)  # runner's
    job_token_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)  # job's
    current_attempt: Mapped[int] = mapped_column(Integer, default=0)
    # Auto-retry: the limit chosen at submit (None = the method's default) and how many
    # automatic requeues happened since the last user action (resume/retry reset it).
    max_retries: Mapped[int | None] = mapped_column(Integer, nullable=True)
    auto_retries: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    attempts: Mapped[list[Attempt]] = relationship(
        back_populates="run", order_by="Attempt.number", cascade="all, delete-orphan"
    )
    events: Mapped[list[Event]] = relationship(
        back_populates="run", order_by="Event.id", cascade="all, delete-orphan"
    )

    def attempt(self, number: int) -> Attempt | None:
        return next((a for a in self.attempts if a.number == number), None)

    @property
    def current(self) -> Attempt | None:
        return self.attempt(self.current_attempt) if self.current_attempt else None


class Attempt(Base):
    __tablename__ = "attempts"
    __table_args__ = (
        UniqueConstraint("run_id", "number", name="uq_attempts_run_number"),
        # The attempts still open (ended_at NULL) and those ended since a day, read through an
        # index: usage adds them to its summaries (0029).
        Index("ix_attempts_ended_at", "ended_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    # "local:<pgid>" once started; several nodes' refs joined with "," in rank order (each
    # node's own ref, state and exit code live in ``nodes``, keyed by node rank).
    executor_ref: Mapped[str | None] = mapped_column(Text, nullable=True)
    allocation: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)  # its Slots
    # {"<rank>": NodeRecord as JSON}; written only by statemachine.node_event
    nodes: Mapped[dict[str, dict[str, Any]]] = mapped_column(
        MutableDict.as_mutable(JSON), default=dict
    )
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    end_reason: Mapped[str | None] = mapped_column(String(40), nullable=True)
    log_path: Mapped[str] = mapped_column(Text, default="")
    resumed_from: Mapped[str | None] = mapped_column(Text, nullable=True)  # checkpoint path
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)

    run: Mapped[Run] = relationship(back_populates="attempts")

    def node_records(self) -> dict[int, NodeRecord]:
        """Every node's record by rank, in rank order (read-only: write through the writer)."""
        return {
            int(rank): NodeRecord.read(record)
            for rank, record in sorted((self.nodes or {}).items(), key=lambda kv: int(kv[0]))
        }


class Event(Base):
    __tablename__ = "events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    src: Mapped[str | None] = mapped_column(String(20), nullable=True)
    dst: Mapped[str] = mapped_column(String(20))
    reason: Mapped[str] = mapped_column(Text, default="")
    actor: Mapped[str] = mapped_column(String(100), default="")

    run: Mapped[Run] = relationship(back_populates="events")
