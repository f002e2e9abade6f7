"""Fixtures of the PostgreSQL tests: the throwaway cluster of ``scripts/postgres.sh``.

The cluster is the one ``STARFORGE_TEST_DATABASE_URL`` names, else the one ``scripts/postgres.sh``
runs (``url``). With neither, the tests skip, except under ``CI=true``, where a skip would hide
a missing service: there they fail.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.postgres.databases import Databases, require_cluster


@pytest.fixture(scope="session")
def postgres() -> Iterator[Databases]:
    made = Databases(require_cluster())
    yield made
    made.close()


@pytest.fixture
def pg_url(postgres: Databases) -> Iterator[str]:
    """A fresh database at head on the cluster."""
    url = postgres.fresh()
    yield url
    postgres.drop(url)
