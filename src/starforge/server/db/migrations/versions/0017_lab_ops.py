"""Running a lab: daily GPU-hour quotas, the maintenance drain, webhook notifications."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from starforge.server.db.migration_ops import run_id_column

revision = "0017_lab_ops"
down_revision = "0015_steps"


def upgrade() -> None:
    op.create_table(
        "daily_gpu_quotas",
        sa.Column("user", sa.String(100), nullable=False),
        sa.Column("gpu_hours", sa.Float(), nullable=True),
        sa.Column("set_by", sa.String(100), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("user"),
    )
    op.create_table(
        "maintenance",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("active", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("started_by", sa.String(100), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "maintenance_paused",
        run_id_column(),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("paused_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("run_id"),
    )
    op.create_table(
        "notify_endpoints",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("user", sa.String(100), nullable=False),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("project", sa.String(100), nullable=True),
        sa.Column("secret", sa.String(128), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_notify_endpoints_user", "notify_endpoints", ["user"])
    op.create_table(
        "notify_outbox",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("endpoint_id", sa.String(32), nullable=False),
        sa.Column("run_id", sa.String(32), nullable=False),
        sa.Column("event", sa.String(40), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("tries", sa.Integer(), server_default="0", nullable=False),
        sa.Column("next_at", sa.DateTime(), nullable=False),
        sa.Column("delivered_at", sa.DateTime(), nullable=True),
        sa.Column("gave_up_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(["endpoint_id"], ["notify_endpoints.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_notify_outbox_endpoint_id", "notify_outbox", ["endpoint_id"])
    op.create_index("ix_notify_outbox_next_at", "notify_outbox", ["next_at"])
    op.create_table(
        "notify_deliveries",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("outbox_id", sa.Integer(), nullable=False),
        sa.Column("endpoint_id", sa.String(32), nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("ok", sa.Boolean(), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["outbox_id"], ["notify_outbox.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_notify_deliveries_outbox_id", "notify_deliveries", ["outbox_id"])
    op.create_index("ix_notify_deliveries_endpoint_id", "notify_deliveries", ["endpoint_id"])


def downgrade() -> None:
    op.drop_table("notify_deliveries")
    op.drop_table("notify_outbox")
    op.drop_table("notify_endpoints")
    op.drop_table("maintenance_paused")
    op.drop_table("maintenance")
    op.drop_table("daily_gpu_quotas")
