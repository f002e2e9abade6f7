"""The steps the Alembic migrations repeat: add or drop columns of one table, a run's id column.

Owns the few schema operations that several migrations spell the same way, so each migration
states only what it changes. Every migration that imports a helper here replays it on every
database that upgrades, so a helper never changes what it does once a migration uses it: a new
need gets a new helper.

Columns are added and dropped in batch mode, which SQLite needs (it cannot alter most things in
place: Alembic copies the table) and PostgreSQL runs as plain ``ALTER TABLE`` statements.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op


def add_columns(table: str, *columns: sa.Column[Any]) -> None:
    """Add ``columns`` to ``table``, in order, in one batch."""
    with op.batch_alter_table(table) as batch:
        for column in columns:
            batch.add_column(column)


def drop_columns(table: str, *names: str) -> None:
    """Drop the columns ``names`` from ``table``, in order, in one batch."""
    with op.batch_alter_table(table) as batch:
        for name in names:
            batch.drop_column(name)


def run_id_column() -> sa.Column[Any]:
    """A child table's ``run_id``: the run's id, its rows deleted with the run."""
    return sa.Column(
        "run_id", sa.String(32), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False
    )
