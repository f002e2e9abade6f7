"""Packed blobs: where each blob of a batch lies in its pack file (``db.packs``)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019_blob_packs"
down_revision = "0018_sweeps"


def upgrade() -> None:
    op.create_table(
        "blob_packs",
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("pack", sa.String(64), nullable=False),
        sa.Column("start", sa.BigInteger(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("digest"),
    )


def downgrade() -> None:
    op.drop_table("blob_packs")
