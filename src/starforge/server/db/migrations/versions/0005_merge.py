"""Join the resources, lifecycle and metrics branches into one head.

Revision ID: 0005_merge
Revises: 0002_resources, 0003_lifecycle, 0004_metrics
"""

from __future__ import annotations

revision = "0005_merge"
down_revision = ("0002_resources", "0003_lifecycle", "0004_metrics")
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Nothing to change: the three branches touch different tables."""


def downgrade() -> None:
    """Nothing to undo."""
