"""Fixtures of the control plane's tests: a real SQLite database under ``tmp_path`` (or a fresh
PostgreSQL database when ``STARFORGE_TEST_DATABASE_URL`` is set), a runtime with a fake executor,
and two users (alice, bob) with known tokens. Nothing here opens a socket but the database's.
Tests marked ``sqlite`` check SQLite's own behaviour and are skipped on PostgreSQL.

On PostgreSQL (the suite's second pass) only the tests that reach a database through
``database_url`` run again: the others (pure functions, real processes on their own SQLite, the
migrations' tests that take the cluster themselves) did exactly the same work in the first pass.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from starforge.server.runtime import Runtime, build_runtime
from starforge.server.services.access import users
from starforge.server.settings import Settings, load_settings
from tests.postgres.databases import URL, Databases, on_postgres

from .factories import INVENTORY, PROFILES, TOKENS, FakeExecutor


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not on_postgres():
        return
    here = Path(__file__).parent
    again, done = [], []
    for item in items:
        mine = here in item.path.parents
        uses_database = "database_url" in getattr(item, "fixturenames", ())
        (done if mine and not uses_database else again).append(item)
    if done:
        config.hook.pytest_deselected(items=done)
        items[:] = again


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # The developer's own STARFORGE_* settings must not leak into the server under test.
    for key in list(os.environ):
        if key.startswith("STARFORGE_"):
            monkeypatch.delenv(key)
    # Jobs run on the host (a test that wants containers says so in its settings): these tests'
    # images live in no registry, so a machine with podman must not resolve their digests.
    monkeypatch.setenv("STARFORGE_CONTAINERS", "none")


@pytest.fixture(autouse=True)
def _sqlite_only(request: pytest.FixtureRequest) -> None:
    if on_postgres() and request.node.get_closest_marker("sqlite") is not None:
        pytest.skip("checks SQLite's own behaviour; this run is on PostgreSQL")


@pytest.fixture(scope="session")
def databases() -> Iterator[Databases | None]:
    if not on_postgres():
        yield None
        return
    made = Databases(URL)
    yield made
    made.close()


@pytest.fixture
def database_url(databases: Databases | None) -> Iterator[str | None]:
    """An empty PostgreSQL database at head for this test, or None (SQLite under the home)."""
    if databases is None:
        yield None
        return
    url = databases.shared()
    yield url
    databases.clean(url)


@pytest.fixture
def settings(tmp_path: Path, database_url: str | None) -> Settings:
    return load_settings(
        tmp_path / "home",
        inventory=INVENTORY,
        profiles=PROFILES,
        url="http://127.0.0.1:9999",
        stop_grace_s=0.5,
        database_url=database_url,
        # Its (fake) jobs share the server's identity: it opts out of the refusal of members'
        # runs on such a server (services/access/isolation.py; tested in
        # tests/server/test_isolation.py).
        isolation="none",
    )


@pytest.fixture
def executor() -> FakeExecutor:
    return FakeExecutor()


@pytest.fixture
def rt(settings: Settings, executor: FakeExecutor) -> Iterator[Runtime]:
    ports = itertools.count(40000)
    runtime = build_runtime(settings, executor=executor)
    runtime.pick_port = lambda: next(ports)
    with runtime.transaction() as session:
        for name, token in TOKENS.items():
            users.ensure_user(session, name, token)
    yield runtime
    runtime.engine.dispose()
