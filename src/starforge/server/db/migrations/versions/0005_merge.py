"""Join the resources, lifecycle and metrics branches into one head."""

from __future__ import annotations

revision = "0005_merge"
down_revision = ("0002_resources", "0003_lifecycle", "0004_metrics")


def upgrade() -> None:
    """Nothing to change: the three branches touch different tables."""


def downgrade() -> None:
    """Nothing to undo."""
