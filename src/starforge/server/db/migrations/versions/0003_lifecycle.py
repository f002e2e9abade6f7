"""The run lifecycle: auto-retry counters on runs, heartbeat and resume point on attempts."""

from __future__ import annotations

import sqlalchemy as sa

from starforge.server.db.migration_ops import add_columns, drop_columns

revision = "0003_lifecycle"
down_revision = "0001"


def upgrade() -> None:
    add_columns(
        "runs",
        sa.Column("max_retries", sa.Integer(), nullable=True),
        sa.Column("auto_retries", sa.Integer(), nullable=False, server_default="0"),
    )
    add_columns(
        "attempts",
        sa.Column("resumed_from", sa.Text(), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(), nullable=True),
    )


def downgrade() -> None:
    drop_columns("attempts", "heartbeat_at", "resumed_from")
    drop_columns("runs", "auto_retries", "max_retries")
