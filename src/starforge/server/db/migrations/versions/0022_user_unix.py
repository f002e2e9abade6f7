"""Users' Unix accounts: ``users.unix_user``, the account a member's jobs run under on Slurm.

Nullable (an existing user is unmapped until an admin maps it) and unique: two users on one
account would share their jobs' files. A downgrade drops the mapping.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022_user_unix"
down_revision = "0021_webhook_secrets"


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("unix_user", sa.String(32), nullable=True))
        batch.create_unique_constraint("uq_users_unix_user", ["unix_user"])


def downgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.drop_constraint("uq_users_unix_user", type_="unique")
        batch.drop_column("unix_user")
