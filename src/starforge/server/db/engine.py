"""The engine, the session factory and the programmatic Alembic upgrade.

SQLite is tuned for one server process with many threads: WAL (readers never block the writer),
a busy timeout, foreign keys on, and every transaction opened with ``BEGIN IMMEDIATE`` so two
read-then-write transactions serialise instead of failing with "database is locked" when one of
them tries to upgrade its read lock. A connection opened with the execution option
``READ_ONLY`` (see :func:`read_only`) begins a deferred transaction instead: a consistent WAL
snapshot that takes no write lock.

The schema is Alembic's: an existing database is upgraded through the migrations. An empty one
(no tables at all) is created from the ORM metadata and stamped with the head revision, which is
the same schema (a test upgrades through every migration and compares) in a fraction of the
time: every test database and every first start of a server is an empty one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, create_engine, event, inspect
from sqlalchemy.engine.url import make_url
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
BUSY_TIMEOUT_MS = 30_000
READ_ONLY = "starforge_read_only"  # execution option: this transaction only reads


def _tune_sqlite(engine: Engine) -> None:
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
        read_only = conn.get_execution_options().get(READ_ONLY, False)
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


def make_engine(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False})
        _tune_sqlite(engine)
        return engine
    return create_engine(url, pool_pre_ping=True)


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


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest revision (a no-op when it is already there)."""
    cfg = alembic_config(engine)
    if not inspect(engine).get_table_names():
        from starforge.server.db.tables import Base  # every table registered on the metadata

        Base.metadata.create_all(engine)
        command.stamp(cfg, "head")
        return
    command.upgrade(cfg, "head")
