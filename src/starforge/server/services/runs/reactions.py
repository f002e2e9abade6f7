"""The reactions' handlers, and the pass over the outbox that the leader runs.

The status writer owes a reaction in the transaction of the change that sets it off
(:mod:`starforge.server.reactions`); :func:`run_due` carries out the owed ones, oldest first.
Guarantees:

- **Nothing lost.** A row stays owed until its handler marked it done; a server killed before,
  during or after a handler finds it owed again at its next pass (the leader's, whichever
  process leads).
- **Nothing doubled.** Each handler is idempotent: ``notify`` writes the webhook outbox and marks
  itself done in one transaction; ``publish_output`` pushes a version, and pushing the identical
  version again is a no-op (a version never changes once pushed), so doing it twice makes one.
- **Failures said and retried.** A handler's refusal (an output that cannot become a dataset:
  empty, a secret in it, the version taken by other files) is final: the reaction is done, and the
  run's log and events say why. Any other failure (the database, the disk) is retried with
  backoff (:func:`backoff_s`), each try's error recorded on the row and in the run's events.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from starforge.contract.errors import StarForgeError
from starforge.contract.states import JobStatus
from starforge.server import reactions
from starforge.server.db.models import Event, Run, utcnow
from starforge.server.db.reactions import Reaction
from starforge.server.services.data import datasets
from starforge.server.services.labops import notify
from starforge.server.services.runs import lifecycle

if TYPE_CHECKING:
    from starforge.server.runtime import Runtime

log = logging.getLogger(__name__)
BATCH = 50  # reactions taken per pass: a backlog drains over passes, never in one long one
BACKOFF_S = 1.0
BACKOFF_MAX_S = 300.0


@dataclass(frozen=True)
class Owed:
    """One owed reaction, as the pass read it."""

    id: int
    run_id: str
    kind: str
    detail: dict[str, Any]
    tries: int


def backoff_s(tries: int) -> float:
    """The wait before try ``tries + 1`` after ``tries`` failed ones."""
    return min(BACKOFF_S * 2 ** max(tries - 1, 0), BACKOFF_MAX_S)


def owed(rt: Runtime, *, now: datetime | None = None, limit: int = BATCH) -> list[Owed]:
    """The reactions due now that this server knows how to do, oldest first (a kind of a newer
    server is left for it, and never fills a batch that this one's reactions wait behind)."""
    now = now or utcnow()
    with rt.reading() as session:
        rows = session.execute(
            sa.select(Reaction.id, Reaction.run_id, Reaction.kind, Reaction.detail, Reaction.tries)
            .where(Reaction.done_at.is_(None), Reaction.due_at <= now)
            .where(Reaction.kind.in_(list(HANDLERS)))
            .order_by(Reaction.id)
            .limit(limit)
        ).all()
    return [Owed(r.id, r.run_id, r.kind, dict(r.detail or {}), r.tries) for r in rows]


def mark_done(session: Session, reaction_id: int, error: str = "") -> None:
    session.execute(
        sa.update(Reaction)
        .where(Reaction.id == reaction_id, Reaction.done_at.is_(None))
        .values(done_at=utcnow(), last_error=error)
    )


def _notify(rt: Runtime, r: Owed) -> str:
    with rt.transaction() as session:
        run = session.get(Run, r.run_id)
        if run is not None and not _retried_by_itself(session, r):
            notify.enqueue(session, run, r.detail)
        mark_done(session, r.id)
    return ""


def _retried_by_itself(session: Session, r: Owed) -> bool:
    """Whether the platform requeued the run right after this ending (an auto-retry, in the
    ending's own transaction): its attempt failed, the run did not, so no ``run.failed`` goes
    out; the run's real ending owes its own. A user's retry later leaves the ending reported."""
    at = datetime.fromisoformat(str(r.detail["at"]))
    found = session.scalar(
        sa.select(Event.id)
        .where(
            Event.run_id == r.run_id,
            Event.src == str(r.detail["status"]),
            Event.dst == JobStatus.QUEUED.value,
            Event.actor == lifecycle.AUTO_RETRY,
            Event.at >= at,
        )
        .limit(1)
    )
    return found is not None


def _publish_output(rt: Runtime, r: Owed) -> str:
    try:
        done = datasets.publish_output(rt, r.run_id)
    except StarForgeError as exc:  # a refusal: the run's news, final
        line = f"could not publish --output-dataset: {exc.message}"
        with rt.transaction() as session:
            mark_done(session, r.id, line)
        return line
    with rt.transaction() as session:
        mark_done(session, r.id)
    if done is None:
        return ""
    was = "published" if done.created else "had already published"
    return f"{was} {done.ref} ({done.version.file_count} file(s))"


HANDLERS: dict[str, Callable[[Runtime, Owed], str]] = {
    reactions.NOTIFY: _notify,
    reactions.PUBLISH_OUTPUT: _publish_output,
}


def run_due(rt: Runtime, *, now: datetime | None = None) -> int:
    """Carry out the reactions due at ``now`` (default: now); return how many were done."""
    done = 0
    for r in owed(rt, now=now):
        try:
            line = HANDLERS[r.kind](rt, r)
        except Exception as exc:  # the database, the disk: tried again later
            log.warning("reaction %s (%s of run %s) failed", r.id, r.kind, r.run_id, exc_info=True)
            _failed(rt, r, exc)
            continue
        done += 1
        if line:
            _say(rt, r.run_id, line)
    return done


def _failed(rt: Runtime, r: Owed, exc: Exception) -> None:
    wait = backoff_s(r.tries + 1)
    error = f"{type(exc).__name__}: {getattr(exc, 'message', None) or exc}"
    note = f"{r.kind} failed (try {r.tries + 1}): {error}; trying again in {wait:.0f} s"
    with contextlib.suppress(Exception), rt.transaction() as session:
        session.execute(
            sa.update(Reaction)
            .where(Reaction.id == r.id)
            .values(
                tries=Reaction.tries + 1,
                due_at=utcnow() + timedelta(seconds=wait),
                last_error=error[:2000],
            )
        )
        status = session.scalar(sa.select(Run.status).where(Run.id == r.run_id))
        if status is not None:
            session.add(
                Event(run_id=r.run_id, src=status, dst=status, reason=note, actor="reactions")
            )


def _say(rt: Runtime, run_id: str, line: str) -> None:
    """Append ``line`` to the log of the run's latest attempt, where its user reads it."""
    with rt.reading() as session:
        run = session.get(Run, run_id)
        if run is None:
            return
        path = rt.storage.layout_of(run).log(run.current_attempt)
    stamp = time.strftime("%H:%M:%S")
    with contextlib.suppress(OSError), path.open("a", encoding="utf-8") as fh:
        fh.write(f"[starforge {stamp}] {line}\n")
