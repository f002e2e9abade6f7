"""Steps of pipelines: ``run_steps`` (which run is which step of which training run)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from starforge.server.db.migration_ops import run_id_column

revision = "0015_steps"
down_revision = "0014_secrets"


def upgrade() -> None:
    op.create_table(
        "run_steps",
        run_id_column(),
        sa.Column("root_run_id", sa.String(32), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("action", sa.String(20), nullable=False),
        sa.ForeignKeyConstraint(["root_run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id"),
        sa.UniqueConstraint("root_run_id", "position", name="uq_run_steps_root_pos"),
    )
    op.create_index("ix_run_steps_root_run_id", "run_steps", ["root_run_id"])


def downgrade() -> None:
    op.drop_index("ix_run_steps_root_run_id", table_name="run_steps")
    op.drop_table("run_steps")
