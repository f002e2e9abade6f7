"""The database's outage is told from a statement's own errors, and said once per change.

(The whole path, PostgreSQL stopped under a running server and ``sf``, is
tests/postgres/test_database_outage.py.)"""

from __future__ import annotations

import logging
import sqlite3

import psycopg
import pytest
from psycopg import errors as pg_errors
from sqlalchemy.exc import IntegrityError, OperationalError

from starforge.contract.errors import DatabaseUnreachable, ServerUnreachable, from_wire
from starforge.server.db import outage


def wrapped(orig: BaseException, *, invalidated: bool = False) -> OperationalError:
    return OperationalError("SELECT 1", {}, orig, connection_invalidated=invalidated)


@pytest.mark.parametrize(
    "exc",
    [
        wrapped(psycopg.OperationalError("connection failed: Connection refused")),
        wrapped(pg_errors.AdminShutdown("terminating connection due to administrator command")),
        wrapped(pg_errors.CannotConnectNow("the database system is starting up")),
        wrapped(pg_errors.ConnectionFailure("connection failure")),
        wrapped(sqlite3.OperationalError("whatever"), invalidated=True),
        wrapped(sqlite3.OperationalError("unable to open database file")),
        psycopg.OperationalError("consuming input failed: server closed the connection"),
    ],
)
def test_a_connection_that_failed_or_was_cut_is_the_database_being_unreachable(
    exc: BaseException,
) -> None:
    assert outage.is_unreachable(exc)


@pytest.mark.parametrize(
    "exc",
    [
        IntegrityError("INSERT", {}, pg_errors.UniqueViolation("duplicate key")),
        wrapped(pg_errors.QueryCanceled("canceling statement due to statement timeout")),
        wrapped(pg_errors.DeadlockDetected("deadlock detected")),
        wrapped(sqlite3.OperationalError("database is locked")),
        ValueError("a bug"),
    ],
)
def test_a_statement_that_failed_on_its_own_is_not_an_outage(exc: BaseException) -> None:
    assert not outage.is_unreachable(exc)


def test_the_watch_says_the_outage_once_and_the_return_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    watch = outage.Watch("postgresql://db/lab")
    down = wrapped(psycopg.OperationalError("connection failed: Connection refused"))
    with caplog.at_level(logging.INFO, logger=outage.__name__):
        watch.answered()  # nothing to say while it answers
        assert all(watch.failed(down) for _ in range(1000))
        assert not watch.failed(ValueError("a bug"))  # for the caller to report
        for _ in range(1000):
            watch.answered()
        assert watch.failed(down)  # a second outage is said again
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 3
    assert said[0].startswith(
        "the database postgresql://db/lab is unreachable (connection failed: Connection refused)"
    )
    assert said[1].startswith("the database postgresql://db/lab answers again (unreachable for")
    assert "is unreachable" in said[2]


def test_the_503_comes_back_to_the_client_as_a_server_unreachable_it_may_retry() -> None:
    err = outage.unreachable_error()
    assert err.http_status == 503
    back = from_wire(err.to_wire(), status=503)
    assert isinstance(back, DatabaseUnreachable) and isinstance(back, ServerUnreachable)
    assert back.message == "the database is unreachable: the server cannot answer until it is back"
