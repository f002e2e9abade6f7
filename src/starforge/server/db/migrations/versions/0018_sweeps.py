"""Sweeps (their grid and early-stopping rule, each variant's run) and preemption records."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from starforge.server.db.migration_ops import run_id_column

revision = "0018_sweeps"
down_revision = "0017_lab_ops"


def upgrade() -> None:
    op.create_table(
        "sweeps",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("user", sa.String(100), nullable=False),
        sa.Column("project", sa.String(100), nullable=False),
        sa.Column("experiment", sa.String(100), nullable=False),
        sa.Column("idempotency_key", sa.String(128), nullable=False),
        sa.Column("grid", sa.JSON(), nullable=False),
        sa.Column("early_stop", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("user", "idempotency_key", name="uq_sweeps_user_idem"),
    )
    op.create_index("ix_sweeps_user", "sweeps", ["user"])
    op.create_table(
        "sweep_runs",
        sa.Column("sweep_id", sa.String(32), nullable=False),
        run_id_column(),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("stopped_rung", sa.Integer(), nullable=True),
        sa.Column("note", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["sweep_id"], ["sweeps.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("sweep_id", "run_id"),
    )
    op.create_table(
        "preemptions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        run_id_column(),
        sa.Column("by_run", sa.String(32), nullable=False),
        sa.Column("by_priority", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.Column("requeued", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_preemptions_run_id", "preemptions", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_preemptions_run_id", table_name="preemptions")
    op.drop_table("preemptions")
    op.drop_table("sweep_runs")
    op.drop_index("ix_sweeps_user", table_name="sweeps")
    op.drop_table("sweeps")
