"""Tokens get a scope: ``api`` (what the user's role allows) or ``console`` (only reads).

``sf job console`` signs the browser in with a console token: it expires within hours and
cannot submit, act on runs or manage tokens, so a link left in a terminal's scrollback or a
browser's history is worth little.
"""

from __future__ import annotations

import sqlalchemy as sa

from starforge.server.db.migration_ops import add_columns, drop_columns

revision = "0011_token_scope"
down_revision = "0010_job_token"


def upgrade() -> None:
    add_columns(
        "api_tokens", sa.Column("scope", sa.String(20), nullable=False, server_default="api")
    )


def downgrade() -> None:
    drop_columns("api_tokens", "scope")
