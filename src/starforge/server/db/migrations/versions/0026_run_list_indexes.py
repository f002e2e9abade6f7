"""Run listings newest first as indexes, so a page reads its rows and not the history behind it.

``GET /runs`` orders by ``(created_at, id)`` descending and pages by keyset on that pair; each
of its filters has an index in that order: a user's own runs (``user``), with ``--status``
(``user, status``), an operator's view of everyone's, with or without ``--status``, and a
project's (the console's project page). The two one-column indexes they replace (``user``,
``status``) are prefixes of the new ones.
"""

from __future__ import annotations

from alembic import op

revision = "0026_run_list_indexes"
down_revision = "0025_leadership"

NEW = {
    "ix_runs_user_created": ["user", "created_at", "id"],
    "ix_runs_user_status_created": ["user", "status", "created_at", "id"],
    "ix_runs_created": ["created_at", "id"],
    "ix_runs_status_created": ["status", "created_at", "id"],
    "ix_runs_project_created": ["project", "created_at", "id"],
}
OLD = {"ix_runs_user": ["user"], "ix_runs_status": ["status"]}


def upgrade() -> None:
    for name, columns in NEW.items():
        op.create_index(name, "runs", columns)
    for name in OLD:
        op.drop_index(name, table_name="runs")


def downgrade() -> None:
    for name, columns in OLD.items():
        op.create_index(name, "runs", columns)
    for name in NEW:
        op.drop_index(name, table_name="runs")
