"""Users get roles and a ``disabled`` flag; their tokens move into their own table.

- ``api_tokens``: one row per API token of a user (name, created, expires, last used, revoked),
  keeping only the token's sha256. Each user's one token (``users.token_sha256``) moves there,
  named ``default``, and the column goes.
- ``users.role``: ``viewer | member | operator | admin``. The old ``user`` role becomes
  ``member`` (it could submit and act on its own runs); ``admin`` stays ``admin``.
- ``users.disabled``: false for every existing user.

Downgrade keeps each user's newest unrevoked token (an older server knew one token per user) and
turns ``member``, ``viewer`` and ``operator`` back into ``user``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_users_tokens"
down_revision = "0008_user_blobs"


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column(
            "user_id", sa.Integer(), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=True),
        sa.Column("last_used_at", sa.DateTime(), nullable=True),
        sa.Column("revoked_at", sa.DateTime(), nullable=True),
        sa.UniqueConstraint("user_id", "name", name="uq_api_tokens_user_name"),
    )
    op.create_index("ix_api_tokens_user_id", "api_tokens", ["user_id"])
    op.execute(
        "INSERT INTO api_tokens (user_id, name, sha256, created_at) "
        "SELECT id, 'default', token_sha256, created_at FROM users"
    )
    op.execute("UPDATE users SET role = 'member' WHERE role <> 'admin'")
    with op.batch_alter_table("users") as batch:
        batch.drop_index("ix_users_token_sha256")
        batch.drop_column("token_sha256")
        batch.add_column(
            sa.Column("disabled", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch.alter_column(
            "role", existing_type=sa.String(20), existing_nullable=False, server_default="member"
        )


def downgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(
            sa.Column("token_sha256", sa.String(64), nullable=False, server_default="")
        )
        batch.drop_column("disabled")
        batch.alter_column(
            "role", existing_type=sa.String(20), existing_nullable=False, server_default="user"
        )
    op.execute(
        "UPDATE users SET token_sha256 = COALESCE((SELECT t.sha256 FROM api_tokens t "
        "WHERE t.user_id = users.id AND t.revoked_at IS NULL ORDER BY t.id DESC LIMIT 1), '')"
    )
    op.execute("UPDATE users SET role = 'user' WHERE role <> 'admin'")
    op.create_index("ix_users_token_sha256", "users", ["token_sha256"])
    op.drop_table("api_tokens")
