"""Fresh PostgreSQL databases for tests, when the suite runs against PostgreSQL.

``STARFORGE_TEST_DATABASE_URL`` (e.g. what ``scripts/postgres.sh url`` prints) switches the server
and integration fixtures from a SQLite file per test to PostgreSQL:

- :meth:`Databases.fresh`: a database of its own, ``CREATE DATABASE … TEMPLATE`` of a template
  migrated once per session (copied files, not created tables). About 0.2 s: for a module.
- :meth:`Databases.shared` + :meth:`Databases.clean`: one database per session, every row deleted
  after each test (a few milliseconds: the tables hold a test's few rows). For each server test.

Every database made here is dropped at the end of the session.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine.url import make_url
from sqlalchemy.pool import NullPool

from starforge.server.db.engine import make_engine, migrate

ENV = "STARFORGE_TEST_DATABASE_URL"
# Read once at import: the server tests clear every STARFORGE_* variable around each test.
URL = os.environ.get(ENV, "")
PG_DIR = os.environ.get("STARFORGE_PG_DIR", "")  # where scripts/postgres.sh keeps its cluster


SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "postgres.sh"


def on_postgres() -> bool:
    """Whether the server and integration fixtures run on PostgreSQL in this session."""
    return URL.startswith("postgresql")


def cluster_url() -> str:
    """The cluster to test on: ``STARFORGE_TEST_DATABASE_URL``, else scripts/postgres.sh's."""
    if URL:
        return URL
    env = {**os.environ, "STARFORGE_PG_DIR": PG_DIR} if PG_DIR else None
    try:
        got = subprocess.run(
            ["bash", str(SCRIPT), "url"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            env=env,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return got.stdout.strip() if got.returncode == 0 else ""


def require_cluster() -> str:
    """:func:`cluster_url`, or skip the test; under ``CI=true`` a missing cluster fails it."""
    url = cluster_url()
    if not url:
        why = "no PostgreSQL: run `scripts/postgres.sh start` or set STARFORGE_TEST_DATABASE_URL"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{why} (under CI a missing service is a failure)")
        pytest.skip(why)
    return url


class Databases:
    """A migrated template and throwaway copies of it, on the cluster ``url`` points at."""

    def __init__(self, url: str) -> None:
        self.url = make_url(url)
        self._admin: Engine = create_engine(
            self.url, poolclass=NullPool, isolation_level="AUTOCOMMIT"
        )
        self._prefix = f"sft_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        self._template: str | None = None
        self._shared: str | None = None
        self._cleaner: Engine | None = None
        self._made: set[str] = set()

    def url_of(self, name: str) -> str:
        return self.url.set(database=name).render_as_string(hide_password=False)

    def empty(self) -> str:
        """A new database with no tables at all (what a first start sees)."""
        return self.url_of(self._create(self._new_name(), template="template0"))

    def fresh(self) -> str:
        """A new database at the head revision."""
        if self._template is None:
            name = self._create(f"{self._prefix}_template", template="template0")
            engine = make_engine(self.url_of(name))
            migrate(engine)
            engine.dispose()  # a template must have no open connections while copied
            self._template = name
        return self.url_of(self._create(self._new_name(), template=self._template))

    def shared(self) -> str:
        """The session's one database at head (clean it after each test)."""
        if self._shared is None:
            self._shared = self.fresh()
        return self._shared

    def clean(self, url: str) -> None:
        """Delete every row (the schema and its revision stay), children before parents."""
        from starforge.server.db.tables import Base

        if self._cleaner is None:  # one kept connection: connecting costs more than deleting
            self._cleaner = create_engine(url, pool_size=1)
        with self._cleaner.begin() as conn:
            for table in reversed(Base.metadata.sorted_tables):
                conn.execute(table.delete())

    def drop(self, url: str) -> None:
        name = make_url(url).database
        assert name is not None
        with self._admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        self._made.discard(name)

    def close(self) -> None:
        if self._cleaner is not None:
            self._cleaner.dispose()
        for name in sorted(self._made, key=lambda n: n == self._template):  # template last
            self.drop(self.url_of(name))
        self._admin.dispose()

    def _create(self, name: str, *, template: str) -> str:
        with self._admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))
        self._made.add(name)
        return name

    def _new_name(self) -> str:
        return f"{self._prefix}_{uuid.uuid4().hex[:10]}"
