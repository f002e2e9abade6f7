"""The run lifecycle: auto-retry counters on runs, heartbeat and resume point on attempts.

Revision ID: 0003_lifecycle
Revises: 0001
Create Date: 2025-01-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_lifecycle"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("max_retries", sa.Integer(), nullable=True))
        batch.add_column(
            sa.Column("auto_retries", sa.Integer(), nullable=False, server_default="0")
        )
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("resumed_from", sa.Text(), nullable=True))
        batch.add_column(sa.Column("heartbeat_at", sa.DateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("heartbeat_at")
        batch.drop_column("resumed_from")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("auto_retries")
        batch.drop_column("max_retries")
