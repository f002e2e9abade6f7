"""``scripts/postgres.sh``: ``stop`` and ``restart`` keep the cluster's data and its port, so a
URL written into a ``server.yaml`` stays right; ``destroy`` alone deletes it.

A cluster of its own (``STARFORGE_PG_DIR``), never the suite's shared one, which other tests use
while this one stops and starts.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from tests.postgres.databases import SCRIPT

pytestmark = pytest.mark.postgres


def script(pg_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STARFORGE_PG_DIR": str(pg_dir)}
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=180
    )


@pytest.fixture
def pg_dir() -> Iterator[Path]:
    if not glob.glob("/usr/lib/postgresql/*/bin/initdb"):
        why = "PostgreSQL is not installed (scripts/postgres.sh start installs it)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{why}: under CI a missing service is a failure")
        pytest.skip(why)
    # Under /var/tmp, open to the `postgres` user the cluster runs as when this runs as root
    # (pytest's own temporary folders are closed to it).
    base = Path(tempfile.mkdtemp(prefix="sf-pg-script-", dir="/var/tmp"))
    base.chmod(0o755)
    folder = base / "cluster"
    yield folder
    script(folder, "destroy")
    shutil.rmtree(base, ignore_errors=True)


def marker(url: str, write: str | None = None) -> str | None:
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            if write is not None:
                conn.execute(text("CREATE TABLE IF NOT EXISTS kept (v text)"))
                conn.execute(text("INSERT INTO kept VALUES (:v)"), {"v": write})
            return conn.execute(text("SELECT v FROM kept")).scalar_one_or_none()
    finally:
        engine.dispose()


def test_stop_and_restart_keep_the_clusters_data_and_port_and_destroy_deletes_it(
    pg_dir: Path,
) -> None:
    started = script(pg_dir, "start")
    assert started.returncode == 0, started.stderr
    url = started.stdout.strip().splitlines()[-1]
    assert url.startswith("postgresql+psycopg://postgres@127.0.0.1:")
    assert marker(url, write="before the stop") == "before the stop"

    assert script(pg_dir, "stop").returncode == 0
    stopped = script(pg_dir, "url")
    assert stopped.returncode == 1 and "not running" in stopped.stderr
    assert (pg_dir / "data" / "PG_VERSION").is_file()  # stopped, not deleted

    again = script(pg_dir, "start")
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip().splitlines()[-1] == url  # the same port
    assert marker(url) == "before the stop"

    restarted = script(pg_dir, "restart")
    assert restarted.returncode == 0, restarted.stderr
    assert restarted.stdout.strip().splitlines()[-1] == url
    assert marker(url) == "before the stop"
    assert script(pg_dir, "url").stdout.strip() == url

    assert script(pg_dir, "destroy").returncode == 0
    assert not pg_dir.exists()
    assert script(pg_dir, "url").returncode == 1
