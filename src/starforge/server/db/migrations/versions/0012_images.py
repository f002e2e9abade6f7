"""Images: the admins' default image per framework, the registry allowlist, and the image each
run was admitted with (the digest-pinned reference and which rule chose it)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from starforge.server.db.migration_ops import add_columns, drop_columns

revision = "0012_images"
down_revision = "0011_token_scope"


def upgrade() -> None:
    op.create_table(
        "image_defaults",
        sa.Column("framework", sa.String(100), nullable=False),
        sa.Column("ref", sa.String(1024), nullable=False),
        sa.Column("set_by", sa.String(100), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("framework"),
    )
    op.create_table(
        "allowed_registries",
        sa.Column("entry", sa.String(400), nullable=False),
        sa.Column("added_by", sa.String(100), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("entry"),
    )
    add_columns(
        "runs",
        sa.Column("image", sa.String(1200), nullable=False, server_default=""),
        sa.Column("image_source", sa.String(40), nullable=False, server_default=""),
    )


def downgrade() -> None:
    drop_columns("runs", "image", "image_source")
    op.drop_table("allowed_registries")
    op.drop_table("image_defaults")
