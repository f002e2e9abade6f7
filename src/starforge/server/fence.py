"""Fencing of the leader's writes: each leadership term has an epoch, and a transaction of a pass
the leader's loops run carries it and is refused once the term is over.

A newly elected leader increments ``leadership.epoch`` (:func:`begin_term`) and runs its loops
with :data:`TERM` set to the new epoch (a context variable: the loops' tasks and the worker threads
they hand their passes to inherit it; an API request's never has it). ``Runtime.transaction``
then starts each of their transactions with :func:`check`: it reads the epoch with a shared lock
(``FOR SHARE`` on PostgreSQL) and raises :class:`Deposed` when it is no longer the term's, so the
pass's writes roll back. The shared lock is held to the transaction's end and the next leader's
increment takes an exclusive one, so a deposed leader's pass either committed before the next
term began or commits nothing; two passes of one term never wait on each other.

On SQLite one process is the only leader; the epoch is kept all the same.
"""

from __future__ import annotations

import os
import socket
from contextvars import ContextVar

import sqlalchemy as sa
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from starforge.contract.errors import StarForgeError
from starforge.server.db.leadership import Leadership
from starforge.server.db.models import utcnow

TERM: ContextVar[int | None] = ContextVar("starforge_leader_term", default=None)


class Deposed(StarForgeError):
    """This process no longer leads: the pass's writes are refused (and rolled back)."""


def begin_term(engine: Engine) -> int:
    """Start a new term: the epoch after the last one, recorded with this process as holder."""
    holder = f"{socket.gethostname()}:{os.getpid()}"
    with engine.begin() as conn:
        row = conn.execute(
            sa.update(Leadership)
            .where(Leadership.id == 1)
            .values(epoch=Leadership.epoch + 1, holder=holder, since=utcnow())
            .returning(Leadership.epoch)
        ).first()
        if row is None:  # a database made before the row existed
            conn.execute(sa.insert(Leadership).values(id=1, epoch=1, holder=holder, since=utcnow()))
            return 1
        return int(row[0])


def check(session: Session, term: int) -> None:
    """Refuse the transaction unless ``term`` is still the current epoch (locked for share)."""
    current = session.execute(
        sa.select(Leadership.epoch).where(Leadership.id == 1).with_for_update(read=True)
    ).scalar()
    if current is not None and current != term:
        raise Deposed(
            f"this process's leadership term {term} is over (term {current} leads): "
            "its pass is refused"
        )
