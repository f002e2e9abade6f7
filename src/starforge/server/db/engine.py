"""The engine, the session factory and the programmatic Alembic upgrade.

SQLite is tuned for one server process with many threads: WAL (readers never block the writer),
a busy timeout, foreign keys on, and every transaction opened with ``BEGIN IMMEDIATE`` so two
read-then-write transactions serialise instead of failing with "database is locked" when one of
them tries to upgrade its read lock. A connection opened with the execution option
``READ_ONLY`` (see :func:`read_only`) begins a deferred transaction instead: a consistent WAL
snapshot that takes no write lock. Writers of one process also queue on an in-process lock
before ``BEGIN IMMEDIATE`` (:class:`_WriterGate`): SQLite's own busy handler polls with sleeps of
up to 100 ms, so under a burst of submissions a waiting writer would sleep long after the lock
came free; the gate hands it over at once. The gate only orders; SQLite's lock stays the guard.

PostgreSQL (``postgresql+psycopg://…``) is the production database: several server processes
share it, so its pool is larger and checked before use, and row locks (``FOR UPDATE``) are real.

The schema is Alembic's: an existing database is upgraded through the migrations. An empty one
(no tables at all) is created from the ORM metadata and stamped with the head revision, which is
the same schema (a test upgrades through every migration and compares) in a fraction of the
time: every test database and every first start of a server is an empty one. A database stamped
with a revision this code does not know (written by a newer StarForge) is refused, never touched.
On PostgreSQL the migration holds an advisory lock, so processes starting together migrate once.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import Connection, Engine, create_engine, event, inspect, text
from sqlalchemy.engine.url import make_url
from sqlalchemy.orm import Session, sessionmaker

from starforge.server.db import outage

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
BUSY_TIMEOUT_MS = 30_000
READ_ONLY = "starforge_read_only"  # execution option: this transaction only reads
# pg_advisory_lock keys (one bigint namespace per database): migrating, and leading the loops.
MIGRATE_LOCK_KEY = 0x5F5F_0001
LEADER_LOCK_KEY = 0x5F5F_0002


class SchemaNewerThanCode(RuntimeError):
    """The database was migrated by a newer StarForge: this code must not serve or change it."""


class _WriterGate:
    """One in-process queue for the write transactions of one SQLite engine.

    Taken just before ``BEGIN IMMEDIATE`` and given back when that transaction's connection
    commits, rolls back or closes (the dialect's own calls, wrapped). A thread that waits longer
    than the busy timeout goes on without it (SQLite's lock still serialises): a gate leaked by
    a lost connection can slow writers down, never stop them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders: set[int] = set()  # id() of the DBAPI connections inside the gate

    def enter(self, connection: Any) -> None:
        key = _raw_id(connection)
        if key in self._holders:
            return
        if self._lock.acquire(timeout=BUSY_TIMEOUT_MS / 1000):
            self._holders.add(key)

    def leave(self, connection: Any) -> None:
        key = _raw_id(connection)
        if key in self._holders:
            self._holders.discard(key)
            self._lock.release()

    def wrap(self, engine: Engine) -> None:
        dialect = engine.dialect
        for name in ("do_commit", "do_rollback", "do_close"):
            original = getattr(dialect, name)

            def wrapped(dbapi_connection: Any, _original: Any = original) -> None:
                try:
                    _original(dbapi_connection)
                finally:
                    self.leave(dbapi_connection)

            setattr(dialect, name, wrapped)


def _raw_id(connection: Any) -> int:
    """The id of the sqlite3 connection itself, whether given bare or in the pool's proxy."""
    return id(getattr(connection, "dbapi_connection", None) or connection)


def _tune_sqlite(engine: Engine) -> None:
    gate = _WriterGate()
    gate.wrap(engine)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from the sqlite3 module so "begin" below decides.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # Straight to the driver: the engine's statement machinery (events, a result) costs
        # ten times the BEGIN itself, and every transaction pays it.
        driver = conn.connection.dbapi_connection
        if conn.get_execution_options().get(READ_ONLY, False):
            driver.execute("BEGIN")
            return
        gate.enter(conn.connection)
        try:
            driver.execute("BEGIN IMMEDIATE")
        except BaseException:
            gate.leave(conn.connection)
            raise


def make_engine(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False})
        _tune_sqlite(engine)
    else:
        # Request handlers run in a pool of threads, each holding a connection for its
        # transaction.
        engine = create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=30)
    outage.watch(engine)  # a connection checked out says the database answers (again)
    return engine


def is_postgres(engine: Engine) -> bool:
    return engine.dialect.name == "postgresql"


def describe_url(url: str) -> str:
    """The database URL as ``sf server status`` shows it: the password hidden."""
    return make_url(url).render_as_string(hide_password=True)


@contextmanager
def read_only(engine: Engine) -> Iterator[Connection]:
    """A connection inside one read-only transaction (rolled back at the end): its SELECTs see
    one consistent state. On SQLite it takes no write lock, so a long read never holds back a
    writer; elsewhere it is a plain transaction."""
    with engine.connect() as conn:
        conn.execution_options(**{READ_ONLY: True})
        with conn.begin() as txn:
            yield conn
            txn.rollback()


def make_sessions(engine: Engine) -> sessionmaker[Session]:
    # Objects stay readable after commit: views are built from them once the decision is saved.
    return sessionmaker(engine, expire_on_commit=False)


def alembic_config(engine: Engine) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False))
    cfg.attributes["engine"] = engine
    return cfg


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def check_not_newer(engine: Engine, cfg: Config) -> None:
    """Refuse a database stamped with a revision these migrations do not contain."""
    revision = current_revision(engine)
    if revision is None:
        return
    try:
        known = ScriptDirectory.from_config(cfg).get_revision(revision) is not None
    except CommandError:
        known = False
    if not known:
        raise SchemaNewerThanCode(
            f"the database {describe_url(str(engine.url))} is at schema revision {revision!r}, "
            "which this StarForge does not know: it was migrated by a newer version. "
            "Run that version (or newer), or restore a backup taken before the upgrade."
        )


@functools.cache
def head_revision() -> str | None:
    """The newest revision of the migrations shipped with this code (read once per process)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    return ScriptDirectory.from_config(cfg).get_current_head()


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest revision (a no-op when it is already there)."""
    if current_revision(engine) == head_revision():  # the usual start: nothing to do, no lock
        return
    if not is_postgres(engine):
        _migrate(engine)
        return
    with engine.connect() as conn:  # concurrent starts on one PostgreSQL migrate one at a time
        conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": MIGRATE_LOCK_KEY})
        conn.commit()
        try:
            _migrate(engine)
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": MIGRATE_LOCK_KEY})
            conn.commit()


def _migrate(engine: Engine) -> None:
    cfg = alembic_config(engine)
    if not inspect(engine).get_table_names():
        from starforge.server.db.tables import Base  # every table registered on the metadata

        Base.metadata.create_all(engine)
        command.stamp(cfg, "head")
        return
    check_not_newer(engine, cfg)
    command.upgrade(cfg, "head")
