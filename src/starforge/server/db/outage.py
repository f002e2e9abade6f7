"""Whether the database answers, said once per change.

With PostgreSQL down, every request and every loop pass fails on its first statement. Each used
to log a traceback of its own (25,418 lines in 20 s) and answer "internal server error". Here a
failure is classified once (:func:`is_unreachable`: the driver could not connect, or the
connection it had was cut) and noted on the :class:`Watch` of its database, which logs ONE line
when the database stops answering and one when it answers again. Requests answer
:class:`~starforge.contract.errors.DatabaseUnreachable` (503) meanwhile (``api/errors``) and the
loops wait for their next pass in silence.

A watch is per database URL, so the leader election's own engine and the request pool of one
process share it. It learns that the database is back from the pool: a connection checked out
(after ``pool_pre_ping``'s ping on PostgreSQL) is a database that answers.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.exc import DBAPIError

from starforge.contract.errors import DatabaseUnreachable

log = logging.getLogger(__name__)

# PostgreSQL's SQLSTATEs of a connection that failed or was cut: class 08 (connection exception),
# and the server shutting down or starting up (57P01 admin_shutdown, 57P02 crash_shutdown,
# 57P03 cannot_connect_now).
_CUT_STATES = ("57P01", "57P02", "57P03")


def is_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the database cannot be reached (not that a statement was wrong)."""
    if isinstance(exc, DBAPIError):
        if exc.connection_invalidated:
            return True
        exc = exc.orig if exc.orig is not None else exc
    if type(exc).__module__.partition(".")[0] == "psycopg":
        import psycopg  # here: an embedded server on SQLite never loads the driver

        return _psycopg_unreachable(exc, psycopg)
    if isinstance(exc, sqlite3.OperationalError):
        return "unable to open database file" in str(exc)
    return False


def _psycopg_unreachable(exc: BaseException, psycopg: Any) -> bool:
    if isinstance(exc, psycopg.Error):
        state = exc.sqlstate
        if state is None:  # failed on this side: no connection, or it broke mid-statement
            return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)
        return bool(state.startswith("08") or state in _CUT_STATES)
    return False


def unreachable_error() -> DatabaseUnreachable:
    """What a request answers while the database does not (the URL is the admin's business)."""
    return DatabaseUnreachable(
        "the database is unreachable: the server cannot answer until it is back",
        hint="try again in a moment; if it lasts, tell the server's admin (the server log says "
        "since when)",
    )


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class Watch:
    """The reachability of one database, as this process last saw it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._down_since: float | None = None

    @property
    def unreachable(self) -> bool:
        return self._down_since is not None

    def failed(self, exc: BaseException) -> bool:
        """Note ``exc``; True when it is the database being unreachable (logged on the change
        only), False for any other error, which the caller reports as it would."""
        if not is_unreachable(exc):
            return False
        with self._lock:
            if self._down_since is not None:
                return True
            self._down_since = time.monotonic()
        log.error(
            "the database %s is unreachable (%s): requests answer 503 and the loops wait until "
            "it answers again",
            self.name,
            _first_line(exc),
        )
        return True

    def answered(self) -> None:
        """The database answered (a connection was checked out): log the return once."""
        if self._down_since is None:  # the common case: no lock
            return
        with self._lock:
            since, self._down_since = self._down_since, None
        if since is not None:
            log.warning(
                "the database %s answers again (unreachable for %.1f s)",
                self.name,
                time.monotonic() - since,
            )


_watches: dict[str, Watch] = {}
_watches_lock = threading.Lock()


def of(engine: Engine) -> Watch:
    """The watch of ``engine``'s database (one per URL in this process)."""
    name = engine.url.render_as_string(hide_password=True)
    with _watches_lock:
        found = _watches.get(name)
        if found is None:
            found = _watches[name] = Watch(name)
        return found


def watch(engine: Engine) -> Watch:
    """:func:`of` ``engine``, told by ``engine``'s pool whenever a connection is checked out."""
    found = of(engine)

    def _checked_out(*_: Any) -> None:
        found.answered()

    event.listen(engine, "checkout", _checked_out)
    return found
