"""Fixtures of the PostgreSQL tests: the throwaway cluster of ``scripts/postgres.sh``.

The cluster is the one ``STARFORGE_TEST_DATABASE_URL`` names, else the one ``scripts/postgres.sh``
runs (``url``). With neither, the tests skip, except under ``CI=true``, where a skip would hide
a missing service: there they fail.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.postgres.databases import URL, Databases

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "postgres.sh"


def cluster_url() -> str:
    if URL:
        return URL
    try:
        got = subprocess.run(
            ["bash", str(SCRIPT), "url"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return got.stdout.strip() if got.returncode == 0 else ""


@pytest.fixture(scope="session")
def postgres() -> Iterator[Databases]:
    url = cluster_url()
    if not url:
        why = "no PostgreSQL: run `scripts/postgres.sh start` or set STARFORGE_TEST_DATABASE_URL"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{why} (under CI a missing service is a failure)")
        pytest.skip(why)
    made = Databases(url)
    yield made
    made.close()


@pytest.fixture
def pg_url(postgres: Databases) -> Iterator[str]:
    """A fresh database at head on the cluster."""
    url = postgres.fresh()
    yield url
    postgres.drop(url)
