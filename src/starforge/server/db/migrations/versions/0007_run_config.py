"""Runs keep the config admission composed, so run files can be written at placement.

``runs.config`` (JSON, NULL for runs admitted before): the experiment's config with the
recorded parameters applied, as admission composed it once. The runner reads it from the run's
``run.json``, which dispatch now writes when it places the run (from the database, the durable
record) instead of admission writing and fsyncing a file on every submit.

Revision ID: 0007_run_config
Revises: 0006_json_columns
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_run_config"
down_revision = "0006_json_columns"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("config", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("config")
