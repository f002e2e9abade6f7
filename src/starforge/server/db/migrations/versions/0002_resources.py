"""Resources: a role on users (admins set quotas) and per-user quotas.

Revision ID: 0002_resources
Revises: 0001
Create Date: 2025-01-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_resources"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("role", sa.String(20), nullable=False, server_default="user"))
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
    with op.batch_alter_table("users") as batch:
        batch.drop_column("role")
