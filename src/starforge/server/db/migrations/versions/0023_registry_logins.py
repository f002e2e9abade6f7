"""Registry logins: one per registry host, the password sealed at rest (ciphertext and key id)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023_registry_logins"
down_revision = "0022_user_unix"


def upgrade() -> None:
    op.create_table(
        "registry_logins",
        sa.Column("host", sa.String(260), nullable=False),
        sa.Column("username", sa.String(256), nullable=False),
        sa.Column("ciphertext", sa.Text(), nullable=False),
        sa.Column("key_id", sa.String(64), nullable=False),
        sa.Column("set_by", sa.String(100), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("host"),
    )


def downgrade() -> None:
    op.drop_table("registry_logins")
