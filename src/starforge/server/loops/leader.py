"""Leadership: which server process runs the scheduler and reconciler loops.

Any number of server processes may serve the API on one PostgreSQL database; exactly one of them
runs the loops. It is elected with a session-level advisory lock (``pg_try_advisory_lock``) taken
on a dedicated connection that it holds for life. The lock belongs to that connection: when the
process dies (even by ``kill -9``) the database closes the connection and frees the lock, and a
follower, retrying every :data:`RETRY_S`, takes over within about a second. The leader checks its
connection as often; once it is gone, another process may already lead, so it stops its loops at
once (a loop that is cut short mid-pass is safe: every step is decided in the database first).

On SQLite there is one server process per database, and it always leads.

The leader publishes the control plane's beacon (its URL) when elected, so runners that lost the
process they reported to find a live one; followers never write it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from starforge.server.db import outage
from starforge.server.db.engine import LEADER_LOCK_KEY, is_postgres

log = logging.getLogger(__name__)
RETRY_S = 1.0


class Election:
    """One process's claim on leadership; ``try_acquire`` and ``still_held`` block (threads)."""

    def __init__(self, engine: Engine) -> None:
        self.postgres = is_postgres(engine)
        # Its own engine without a pool: the lock's connection is never lent to a request.
        self._engine = create_engine(engine.url, poolclass=NullPool) if self.postgres else None
        self._conn: Connection | None = None
        # Asked every RETRY_S: while the database is down that is said once, not every second.
        self._watch = outage.watch(self._engine) if self._engine is not None else None

    def try_acquire(self) -> bool:
        if self._engine is None:
            return True
        try:
            if self._conn is None:
                self._conn = self._engine.connect()
            got = self._conn.execute(
                text("SELECT pg_try_advisory_lock(:k)"), {"k": LEADER_LOCK_KEY}
            ).scalar()
            self._conn.commit()  # the lock is the session's: no transaction stays open
        except DBAPIError as exc:
            if self._watch is None or not self._watch.failed(exc):
                log.warning("could not reach the database to ask for leadership", exc_info=True)
            self._drop()
            return False
        return bool(got)

    def still_held(self) -> bool:
        if self._engine is None:
            return True
        if self._conn is None:
            return False
        try:
            self._conn.execute(text("SELECT 1")).scalar()
            self._conn.commit()
        except DBAPIError as exc:
            if self._watch is not None and self._watch.failed(exc):
                log.error("lost the leadership connection (no database): stopping the loops")
            else:
                log.error("lost the leadership connection: stopping the loops", exc_info=True)
            self._drop()
            return False
        return True

    def release(self) -> None:
        self._drop()  # closing the session frees its advisory locks
        if self._engine is not None:
            self._engine.dispose()

    def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(DBAPIError):
                self._conn.close()
            self._conn = None


Loops = Callable[[], list[asyncio.Task[None]]]


async def lead(election: Election, start_loops: Loops, on_change: Callable[[bool], None]) -> None:
    """Run for the life of the app: wait to be elected, run the loops while leading, repeat."""
    try:
        while True:
            if not await asyncio.to_thread(election.try_acquire):
                await asyncio.sleep(RETRY_S)
                continue
            log.info("elected leader: running the scheduler and reconciler")
            on_change(True)
            tasks = start_loops()
            try:
                while await asyncio.to_thread(election.still_held):
                    if any(task.done() for task in tasks):  # a loop must never end while leading
                        log.error("a loop ended while this process leads: restarting the loops")
                        await stop_tasks(tasks)
                        tasks = start_loops()
                    await asyncio.sleep(RETRY_S)
            finally:
                await stop_tasks(tasks)
                on_change(False)
    finally:
        await asyncio.to_thread(election.release)


async def stop_tasks(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel ``tasks`` and wait for them; a task that had failed is logged, not raised."""
    for task in tasks:
        task.cancel()
    for task in tasks:
        try:
            await task
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("loop task %s had failed", task.get_name())
