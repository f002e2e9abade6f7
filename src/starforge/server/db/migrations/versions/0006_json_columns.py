"""JSON columns: the nine ``*_json`` text columns become SQLAlchemy ``JSON`` columns.

Each text column is renamed without its ``_json`` suffix (``runs.spec_json`` -> ``runs.spec``)
and retyped ``JSON``; the stored values are JSON text already, so nothing is lost in between:

- SQLite keeps a JSON column as text. Batch mode copies the table once, moving each value as it
  is (Alembic casts nothing into JSON there: a ``CAST(... AS JSON)`` would be a numeric cast).
  ``migrations/env.py`` turns foreign keys off meanwhile, so dropping the old ``runs`` does not
  cascade into its attempts, events and metrics.
- PostgreSQL converts in place: ``ALTER ... TYPE JSON USING <column>::json``.

SQL NULL (``quotas.allowed_profiles_json``: every profile) stays SQL NULL.

Revision ID: 0006_json_columns
Revises: 0005_merge
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_json_columns"
down_revision = "0005_merge"
branch_labels = None
depends_on = None

# table -> [(old text column, new JSON column, nullable)]
COLUMNS: dict[str, list[tuple[str, str, bool]]] = {
    "runs": [
        ("spec_json", "spec", False),
        ("manifest_json", "manifest", False),
        ("pools_json", "pools", False),
    ],
    "attempts": [("allocation_json", "allocation", False), ("nodes_json", "nodes", False)],
    "quotas": [
        ("max_gpus_per_series_json", "max_gpus_per_series", False),
        ("allowed_profiles_json", "allowed_profiles", True),
    ],
    "run_meta": [("hparams_json", "hparams", False), ("meta_json", "meta", False)],
}


def upgrade() -> None:
    for table, cols in COLUMNS.items():
        with op.batch_alter_table(table) as batch:
            for old, new, nullable in cols:
                batch.alter_column(
                    old,
                    new_column_name=new,
                    type_=sa.JSON(none_as_null=True),
                    existing_type=sa.Text(),
                    existing_nullable=nullable,
                    postgresql_using=f"{old}::json",
                )


def downgrade() -> None:
    for table, cols in COLUMNS.items():
        with op.batch_alter_table(table) as batch:
            for old, new, nullable in cols:
                batch.alter_column(
                    new,
                    new_column_name=old,
                    type_=sa.Text(),
                    existing_type=sa.JSON(none_as_null=True),
                    existing_nullable=nullable,
                    postgresql_using=f"{new}::text",
                )
