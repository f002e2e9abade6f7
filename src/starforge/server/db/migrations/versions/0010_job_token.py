"""The job's own token: ingest takes only it, lifecycle only the runner's ``run_token``."""

from __future__ import annotations

import sqlalchemy as sa

from starforge.server.db.migration_ops import add_columns, drop_columns

revision = "0010_job_token"
down_revision = "0009_users_tokens"


def upgrade() -> None:
    # NULL for runs placed before: their jobs hold the runner's token, which ingest now refuses.
    add_columns("runs", sa.Column("job_token_sha256", sa.String(64), nullable=True))


def downgrade() -> None:
    drop_columns("runs", "job_token_sha256")
