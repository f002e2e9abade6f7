"""Observability: metric points by (run, key, step) and each run's reported metadata.

Revision ID: 0004_metrics
Revises: 0001
Create Date: 2025-01-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_metrics"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "metric_points",
        sa.Column(
            "run_id", sa.String(32), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("key", sa.String(200), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "key", "step"),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "run_meta",
        sa.Column(
            "run_id", sa.String(32), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("hparams_json", sa.Text(), nullable=False),
        sa.Column("meta_json", sa.Text(), nullable=False),
        sa.Column("last_step", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("run_id"),
    )


def downgrade() -> None:
    op.drop_table("run_meta")
    op.drop_table("metric_points")
