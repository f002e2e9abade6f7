"""Reruns: a run records the run it reruns (``sf job rerun``); "" for a run submitted from a lab."""

from __future__ import annotations

import sqlalchemy as sa

from starforge.server.db.migration_ops import add_columns, drop_columns

revision = "0028_reruns"
down_revision = "0027_sweep_runs_by_run"


def upgrade() -> None:
    add_columns("runs", sa.Column("rerun_of", sa.String(32), nullable=False, server_default=""))


def downgrade() -> None:
    drop_columns("runs", "rerun_of")
