"""Blob ownership: which user has uploaded which digest (existence is answered per user)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_user_blobs"
down_revision = "0007_run_config"


def upgrade() -> None:
    op.create_table(
        "user_blobs",
        sa.Column("user", sa.String(100), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("user", "digest"),
    )


def downgrade() -> None:
    op.drop_table("user_blobs")
