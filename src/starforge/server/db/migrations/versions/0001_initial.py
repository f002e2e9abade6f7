"""The first schema: users, runs, attempts, events."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from starforge.server.db.migration_ops import run_id_column

revision = "0001"
down_revision = None


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(100), nullable=False, unique=True),
        sa.Column("token_sha256", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_users_token_sha256", "users", ["token_sha256"])
    op.create_table(
        "runs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("user", sa.String(100), nullable=False),
        sa.Column("project", sa.String(100), nullable=False),
        sa.Column("experiment", sa.String(100), nullable=False),
        sa.Column("method", sa.String(200), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("end_reason", sa.String(40), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("spec_json", sa.Text(), nullable=False),
        sa.Column("manifest_json", sa.Text(), nullable=False),
        sa.Column("pools_json", sa.Text(), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("idempotency_key", sa.String(128), nullable=False),
        sa.Column("run_token_sha256", sa.String(64), nullable=True),
        sa.Column("current_attempt", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        sa.Column("ended_at", sa.DateTime(), nullable=True),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.UniqueConstraint("user", "idempotency_key", name="uq_runs_user_idem"),
    )
    op.create_index("ix_runs_user", "runs", ["user"])
    op.create_index("ix_runs_status", "runs", ["status"])
    op.create_table(
        "attempts",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        run_id_column(),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("executor_ref", sa.Text(), nullable=True),
        sa.Column("allocation_json", sa.Text(), nullable=False),
        sa.Column("nodes_json", sa.Text(), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        sa.Column("ended_at", sa.DateTime(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("end_reason", sa.String(40), nullable=True),
        sa.Column("log_path", sa.Text(), nullable=False),
        sa.UniqueConstraint("run_id", "number", name="uq_attempts_run_number"),
    )
    op.create_index("ix_attempts_run_id", "attempts", ["run_id"])
    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        run_id_column(),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.Column("src", sa.String(20), nullable=True),
        sa.Column("dst", sa.String(20), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("actor", sa.String(100), nullable=False),
    )
    op.create_index("ix_events_run_id", "events", ["run_id"])


def downgrade() -> None:
    op.drop_table("events")
    op.drop_table("attempts")
    op.drop_table("runs")
    op.drop_table("users")
