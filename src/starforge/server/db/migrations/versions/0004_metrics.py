"""Observability: metric points by (run, key, step) and each run's reported metadata."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from starforge.server.db.migration_ops import run_id_column

revision = "0004_metrics"
down_revision = "0001"


def upgrade() -> None:
    op.create_table(
        "metric_points",
        run_id_column(),
        sa.Column("key", sa.String(200), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "key", "step"),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "run_meta",
        run_id_column(),
        sa.Column("hparams_json", sa.Text(), nullable=False),
        sa.Column("meta_json", sa.Text(), nullable=False),
        sa.Column("last_step", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("run_id"),
    )


def downgrade() -> None:
    op.drop_table("run_meta")
    op.drop_table("metric_points")
