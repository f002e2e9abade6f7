"""Variants found by their run: a job's report asks, at each new step, whether its run is a variant
of a sweep with rungs (``services/workflows/sweeps.rungs_of``); ``sweep_runs``'s key starts with the
sweep.
"""

from __future__ import annotations

from alembic import op

revision = "0027_sweep_runs_by_run"
down_revision = "0026_run_list_indexes"


def upgrade() -> None:
    op.create_index("ix_sweep_runs_run_id", "sweep_runs", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_sweep_runs_run_id", table_name="sweep_runs")
