"""Runs keep the config admission composed, so run files can be written at placement.

``runs.config`` (JSON, NULL for runs admitted before): the experiment's config with the
recorded parameters applied, as admission composed it once. The runner reads it from the run's
``run.json``, which dispatch now writes when it places the run (from the database, the durable
record) instead of admission writing and fsyncing a file on every submit.
"""

from __future__ import annotations

import sqlalchemy as sa

from starforge.server.db.migration_ops import add_columns, drop_columns

revision = "0007_run_config"
down_revision = "0006_json_columns"


def upgrade() -> None:
    add_columns("runs", sa.Column("config", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    drop_columns("runs", "config")
