"""JSON columns: the nine ``*_json`` text columns become SQLAlchemy ``JSON`` columns.

Each text column is renamed without its ``_json`` suffix (``runs.spec_json`` -> ``runs.spec``)
and retyped ``JSON``; the stored values are JSON text already, so nothing is lost in between:

- SQLite keeps a JSON column as text. Batch mode copies the table once, moving each value as it
  is (Alembic casts nothing into JSON there: a ``CAST(... AS JSON)`` would be a numeric cast).
  ``migrations/env.py`` turns foreign keys off meanwhile, so dropping the old ``runs`` does not
  cascade into its attempts, events and metrics.
- PostgreSQL converts in place: ``ALTER ... TYPE JSON USING <column>::json``.

SQL NULL (``quotas.allowed_profiles_json``: every profile) stays SQL NULL.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_json_columns"
down_revision = "0005_merge"

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
    _retype(to_json=True)


def downgrade() -> None:
    _retype(to_json=False)


def _retype(to_json: bool) -> None:
    """Rename and retype every column of ``COLUMNS``: text to JSON, or back."""
    text, json = sa.Text(), sa.JSON(none_as_null=True)
    for table, cols in COLUMNS.items():
        with op.batch_alter_table(table) as batch:
            for text_name, json_name, nullable in cols:
                old, new = (text_name, json_name) if to_json else (json_name, text_name)
                batch.alter_column(
                    old,
                    new_column_name=new,
                    type_=json if to_json else text,
                    existing_type=text if to_json else json,
                    existing_nullable=nullable,
                    postgresql_using=f"{old}::{'json' if to_json else 'text'}",
                )
