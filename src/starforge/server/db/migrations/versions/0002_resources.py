"""Resources: a role on users (admins set quotas) and per-user quotas."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from starforge.server.db.migration_ops import add_columns, drop_columns

revision = "0002_resources"
down_revision = "0001"


def upgrade() -> None:
    add_columns("users", sa.Column("role", sa.String(20), nullable=False, server_default="user"))
    op.create_table(
        "quotas",
        sa.Column("user", sa.String(100), primary_key=True),
        sa.Column("max_gpus", sa.Integer(), nullable=True),
        sa.Column("max_gpus_per_series_json", sa.Text(), nullable=False),
        sa.Column("max_runs", sa.Integer(), nullable=True),
        sa.Column("allowed_profiles_json", sa.Text(), nullable=True),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.Column("updated_by", sa.String(100), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("quotas")
    drop_columns("users", "role")
