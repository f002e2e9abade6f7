"""The job's own token: ingest takes only it, lifecycle only the runner's ``run_token``.

Revision ID: 0010_job_token
Revises: 0009_users_tokens
Create Date: 2025-01-09
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_job_token"
down_revision = "0009_users_tokens"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # NULL for runs placed before: their jobs hold the runner's token, which ingest now refuses.
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("job_token_sha256", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("job_token_sha256")
