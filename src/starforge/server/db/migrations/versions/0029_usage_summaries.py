"""Usage summaries: GPU-hours of ended attempts per (UTC day, user, project, series), and
``attempts.ended_at`` indexed (the open attempts and the recent ones, read beside them).

The summaries are filled here from the attempts that already ended, by the rule the server keeps
them by from now on: an attempt's GPUs of each series (its allocation's slots under the series of
their pool, "?" for a pool the run does not name) × the part of ``[started_at, ended_at)`` in each
UTC day. The rule is spelled out here, not imported, so this migration does the same on every
database whatever the code becomes.
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0029_usage_summaries"
down_revision = "0028_reruns"

_BATCH = 5000


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _utc(value: Any) -> datetime:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _hours(pools: Any, allocation: Any, started: Any, ended: Any) -> dict[tuple[date, str], float]:
    series = {p.get("name"): p.get("series") for p in _json(pools) or []}
    held: dict[str, int] = defaultdict(int)
    for slot in _json(allocation) or []:
        if gpus := len(slot.get("gpus") or []):
            held[series.get(slot.get("pool")) or "?"] += gpus
    found: dict[tuple[date, str], float] = defaultdict(float)
    at, end = _utc(started), _utc(ended)
    while at < end:
        upto = min(end, datetime.combine(at.date() + timedelta(days=1), time(), tzinfo=UTC))
        for name, gpus in held.items():
            found[(at.date(), name)] += gpus * (upto - at).total_seconds() / 3600
        at = upto
    return found


def upgrade() -> None:
    op.create_table(
        "usage_summaries",
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("user", sa.String(100), nullable=False),
        sa.Column("project", sa.String(100), nullable=False),
        sa.Column("series", sa.String(100), nullable=False),
        sa.Column("gpu_hours", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("day", "user", "project", "series"),
    )
    op.create_index("ix_attempts_ended_at", "attempts", ["ended_at"])
    conn = op.get_bind()
    rows = conn.execute(
        sa.text(
            "SELECT runs.user, runs.project, runs.pools, attempts.allocation, "
            "attempts.started_at, attempts.ended_at FROM attempts "
            "JOIN runs ON runs.id = attempts.run_id "
            "WHERE attempts.started_at IS NOT NULL AND attempts.ended_at IS NOT NULL"
        )
    )
    totals: dict[tuple[date, str, str, str], float] = defaultdict(float)
    for user, project, pools, allocation, started, ended in rows:
        for (day, series), hours in _hours(pools, allocation, started, ended).items():
            totals[(day, user, project, series)] += hours
    table = sa.table(
        "usage_summaries",
        sa.column("day", sa.Date()),
        sa.column("user", sa.String()),
        sa.column("project", sa.String()),
        sa.column("series", sa.String()),
        sa.column("gpu_hours", sa.Float()),
    )
    found = [
        {"day": d, "user": u, "project": p, "series": s, "gpu_hours": h}
        for (d, u, p, s), h in totals.items()
    ]
    for at in range(0, len(found), _BATCH):
        conn.execute(sa.insert(table), found[at : at + _BATCH])


def downgrade() -> None:
    op.drop_index("ix_attempts_ended_at", table_name="attempts")
    op.drop_table("usage_summaries")
