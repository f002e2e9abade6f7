"""Webhook signing secrets sealed at rest: ``notify_endpoints.secret`` becomes ``ciphertext``,
with ``key_id``.

The key ring lives outside the database (``services/access/secret_keys``), so this migration cannot
seal: it keeps each existing secret as it is in ``ciphertext`` with ``key_id`` "" (in the clear),
and the leader's first notify pass seals those rows (``services/labops/notify.reseal``). A downgrade
cannot open sealed rows either: it puts the column back as it was, and an endpoint sealed meanwhile
then signs with its ciphertext, which its receiver refuses (add it again after a downgrade).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021_webhook_secrets"
down_revision = "0020_queue_order_index"


def upgrade() -> None:
    with op.batch_alter_table("notify_endpoints") as batch:
        batch.alter_column(
            "secret",
            new_column_name="ciphertext",
            existing_type=sa.String(128),
            type_=sa.Text(),
            existing_nullable=False,
        )
        batch.add_column(sa.Column("key_id", sa.String(64), server_default="", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("notify_endpoints") as batch:
        batch.drop_column("key_id")
        batch.alter_column(
            "ciphertext",
            new_column_name="secret",
            existing_type=sa.Text(),
            type_=sa.String(128),
            existing_nullable=False,
        )
