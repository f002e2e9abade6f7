"""The queue's order as an index: ``runs (status, priority, created_at, id)``.

A submit answers its place in the queue with one COUNT of the queued runs ahead of it
(``services.scheduling.queue.priority_position``); with this index that COUNT reads index entries
only, never the runs' rows (their spec, manifest and config are the bulk of the table).
"""

from __future__ import annotations

from alembic import op

revision = "0020_queue_order_index"
down_revision = "0019_blob_packs"


def upgrade() -> None:
    op.create_index("ix_runs_queue_order", "runs", ["status", "priority", "created_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_runs_queue_order", table_name="runs")
