"""What a run's change of status sets off: the reactions the status writer owes, by kind.

:func:`owed` is the one table of them, read by ``statemachine.transition`` in the transition's
transaction; :func:`record` writes them to the outbox (``db/reactions.py``) in that same
transaction. Who carries each kind out is ``services/runs/reactions.py`` (its handlers, run by the
leader): this module, like the status writer that uses it, imports nothing above the database.

- ``notify``: a terminal status owes the webhooks of the endpoints that follow it;
- ``publish_output``: a success with ``--output-dataset`` owes that dataset version.

A run's next ``--then`` step is not a reaction: it is a row the success writes itself
(``statemachine.start_next_step``), so it exists exactly when the success does.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from starforge.contract.states import JobStatus
from starforge.server.db.models import Run
from starforge.server.db.reactions import Reaction

NOTIFY = "notify"
PUBLISH_OUTPUT = "publish_output"
KINDS = (NOTIFY, PUBLISH_OUTPUT)

_INSERT = sa.insert(Reaction.__table__)


def owed(run: Run, dst: JobStatus) -> list[str]:
    """The kinds of reaction ``run``'s move to ``dst`` sets off, in the order they are owed."""
    kinds = []
    if dst.is_terminal:
        kinds.append(NOTIFY)
    if dst is JobStatus.SUCCEEDED and (run.spec or {}).get("output_dataset"):
        kinds.append(PUBLISH_OUTPUT)
    return kinds


def snapshot(run: Run, at: datetime) -> dict[str, Any]:
    """The run as the transition left it (what a reaction reports, whatever came after)."""
    return {
        "status": run.status,
        "end_reason": run.end_reason,
        "exit_code": run.exit_code,
        "attempt": run.current_attempt,
        "at": at.isoformat(),
    }


def record(session: Session, run: Run, kinds: list[str], at: datetime) -> None:
    """Owe ``kinds`` for ``run`` in the caller's transaction (one INSERT)."""
    if not kinds:
        return
    detail = snapshot(run, at)
    rows = [
        {"run_id": run.id, "kind": k, "detail": detail, "created_at": at, "due_at": at, "tries": 0}
        for k in kinds
    ]
    session.connection().execute(_INSERT, rows)
