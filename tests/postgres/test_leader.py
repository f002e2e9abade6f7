"""Leadership on PostgreSQL: one holder of the advisory lock at a time, freed with its session;
``sf server start --database-url`` serves from PostgreSQL and ``sf server status`` says so."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine.url import make_url

from starforge.cli.main import main
from starforge.server.db.engine import make_engine
from starforge.server.loops.leader import Election
from tests.conftest import Result
from tests.server.factories import eventually

pytestmark = pytest.mark.postgres


def test_only_one_process_leads_and_another_takes_over_once_its_session_ends(
    pg_url: str,
) -> None:
    engine = make_engine(pg_url)
    first, second = Election(engine), Election(engine)
    try:
        assert first.try_acquire() is True
        assert second.try_acquire() is False
        assert first.try_acquire() is True  # asking again keeps it
        assert first.still_held() is True
        first.release()  # what a dead process's closed connection does
        # PostgreSQL frees the lock when the closed session's backend has ended, which it does
        # after the client's close returns: the other process takes over once it has.
        eventually(second.try_acquire, what="the lock freed with the first session")
        assert first.try_acquire() is False
    finally:
        first.release()
        second.release()
        engine.dispose()


def test_on_sqlite_the_one_process_always_leads(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}")
    election = Election(engine)
    assert election.try_acquire() and election.still_held()
    election.release()
    engine.dispose()


@pytest.fixture
def server_on_postgres(
    pg_url: str, sf_home: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """``sf server start --database-url`` with a password in the URL (trust auth ignores it)."""
    url = make_url(pg_url).set(password="s3cret-pw").render_as_string(hide_password=False)
    monkeypatch.delenv("STARFORGE_DATABASE_URL", raising=False)
    try:
        assert main(["server", "start", "--database-url", url]) == 0
        yield url
    finally:
        main(["server", "stop"])


def test_sf_server_status_names_the_postgres_database_without_its_password(
    server_on_postgres: str, sf: Callable[..., Result]
) -> None:
    got = sf("server", "status", "--json")
    assert got.code == 0, got.err
    body = got.json()
    assert isinstance(body, dict)
    assert str(body["database"]).startswith("postgresql+psycopg://postgres:***@127.0.0.1:")
    assert "s3cret-pw" not in got.out
    assert body["leader"] is True
    text = sf("server", "status")
    assert "postgresql+psycopg://postgres:***@" in text.out
    assert "leader" in text.out
