"""Secrets: users' and lab-wide secrets, encrypted at rest (ciphertext and key id only)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_secrets"
down_revision = "0013_datasets"


def upgrade() -> None:
    op.create_table(
        "secrets",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("scope", sa.String(10), nullable=False),
        sa.Column("owner", sa.String(100), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("ciphertext", sa.Text(), nullable=False),
        sa.Column("key_id", sa.String(64), nullable=False),
        sa.Column("set_by", sa.String(100), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("scope", "owner", "name", name="uq_secrets_scope_owner"),
    )


def downgrade() -> None:
    op.drop_table("secrets")
