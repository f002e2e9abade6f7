"""Tokens get a scope: ``api`` (what the user's role allows) or ``console`` (only reads).

``sf job console`` signs the browser in with a console token: it expires within hours and
cannot submit, act on runs or manage tokens, so a link left in a terminal's scrollback or a
browser's history is worth little.

Revision ID: 0011_token_scope
Revises: 0010_job_token
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_token_scope"
down_revision = "0010_job_token"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("scope", sa.String(20), nullable=False, server_default="api"))


def downgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("scope")
