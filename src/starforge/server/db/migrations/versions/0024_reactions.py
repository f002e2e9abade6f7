"""The reactions outbox (``db/reactions.py``): what a transition sets off, owed until done."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from starforge.server.db.migration_ops import run_id_column

revision = "0024_reactions"
down_revision = "0023_registry_logins"


def upgrade() -> None:
    op.create_table(
        "reactions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        run_id_column(),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("due_at", sa.DateTime(), nullable=False),
        sa.Column("tries", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("done_at", sa.DateTime(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=False, server_default=""),
    )
    op.create_index("ix_reactions_run_id", "reactions", ["run_id"])
    op.create_index("ix_reactions_owed", "reactions", ["done_at", "due_at"])


def downgrade() -> None:
    op.drop_table("reactions")
