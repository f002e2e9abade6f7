"""The leadership term (``db/leadership.py``): one row, its epoch fencing the leader's writes."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from alembic import op

revision = "0025_leadership"
down_revision = "0024_reactions"


def upgrade() -> None:
    table = op.create_table(
        "leadership",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("holder", sa.String(200), nullable=False),
        sa.Column("since", sa.DateTime(), nullable=False),
    )
    # The epoch before any term: the first leader makes it 1.
    op.bulk_insert(table, [{"id": 1, "epoch": 0, "holder": "", "since": datetime(2000, 1, 1)}])


def downgrade() -> None:
    op.drop_table("leadership")
