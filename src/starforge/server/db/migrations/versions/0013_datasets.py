"""Platform datasets: datasets (owner, name, visibility) and their immutable versions."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_datasets"
down_revision = "0012_images"


def upgrade() -> None:
    op.create_table(
        "datasets",
        sa.Column("owner", sa.String(100), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("public", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("owner", "name"),
    )
    op.create_table(
        "dataset_versions",
        sa.Column("owner", sa.String(100), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("version", sa.String(100), nullable=False),
        sa.Column("files", sa.JSON(), nullable=False),
        sa.Column("manifest_sha256", sa.String(64), nullable=False),
        sa.Column("file_count", sa.Integer(), nullable=False),
        sa.Column("total_bytes", sa.BigInteger(), nullable=False),
        sa.Column("readme", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("owner", "name", "version"),
    )


def downgrade() -> None:
    op.drop_table("dataset_versions")
    op.drop_table("datasets")
