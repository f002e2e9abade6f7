"""PostgreSQL stopped under a running server: ``sf`` says the database is unreachable in one line
(not "internal server error"), the server's log grows by a bounded number of lines however many
requests arrive (one per change, not a traceback per request), and once the database is back
``sf`` works again without restarting the server.

A cluster of its own (``STARFORGE_PG_DIR``): stopping the suite's shared one would fail the tests
that use it meanwhile.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from starforge.client import config
from starforge.server.db.engine import make_engine, make_sessions, migrate
from starforge.server.services.access import users
from tests.conftest import Result
from tests.postgres.test_postgres_script import script

pytestmark = pytest.mark.postgres

TOKEN = "alice-outage-token"
REQUESTS = 40


def eventually(check: Callable[[], bool], what: str, limit_s: float = 60.0) -> None:
    deadline = time.monotonic() + limit_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.fixture
def own_cluster() -> Iterator[Path]:
    """A stopped-and-started-at-will cluster, deleted at the end."""
    if not glob.glob("/usr/lib/postgresql/*/bin/initdb"):
        why = "PostgreSQL is not installed (scripts/postgres.sh start installs it)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{why}: under CI a missing service is a failure")
        pytest.skip(why)
    base = Path(tempfile.mkdtemp(prefix="sf-pg-outage-", dir="/var/tmp"))
    base.chmod(0o755)  # open to the `postgres` user the cluster runs as under root
    folder = base / "cluster"
    yield folder
    script(folder, "destroy")
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def server_on(own_cluster: Path, tmp_path: Path) -> Iterator[tuple[Path, str, str]]:
    """A server on the cluster (started first); its home, its URL and the database's."""
    started = script(own_cluster, "start")
    assert started.returncode == 0, started.stderr
    url = started.stdout.strip().splitlines()[-1]
    engine = make_engine(url)
    migrate(engine)
    with make_sessions(engine).begin() as session:
        users.ensure_user(session, "alice", TOKEN)
    engine.dispose()
    home = tmp_path / "server-home"
    home.mkdir()
    settings = {
        "database_url": url,
        "storage_root": str(tmp_path / "storage"),
        "embedded": False,
        "inventory": [{"name": "h200-1", "series": "h200", "gpus": 8}],
    }
    (home / "server.yaml").write_text(yaml.safe_dump(settings))
    env = {k: v for k, v in os.environ.items() if not k.startswith("STARFORGE_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "starforge.server", "--home", str(home)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(home / "server.err").open("wb"),
        start_new_session=True,
    )
    try:
        eventually(lambda: config.read_server_file(home) is not None, "the server to start")
        info = config.read_server_file(home)
        assert info is not None
        yield home, str(info["url"]), url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def log_lines(home: Path) -> list[str]:
    return (home / "server" / "server.log").read_text().splitlines()


def test_a_stopped_database_is_one_plain_line_in_sf_and_one_in_the_log_until_it_is_back(
    server_on: tuple[Path, str, str],
    own_cluster: Path,
    sf: Callable[..., Result],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    home, url, url_of_db = server_on
    monkeypatch.setenv("STARFORGE_SERVER", url)
    monkeypatch.setenv("STARFORGE_TOKEN", TOKEN)
    before = sf("job", "ls")
    assert before.code == 0, before.err

    assert script(own_cluster, "stop").returncode == 0
    down = sf("job", "ls")
    assert down.code == 1
    lines = down.err.strip().splitlines()
    assert lines[0] == (
        "error: the database is unreachable: the server cannot answer until it is back"
    )
    assert len(lines) == 2 and lines[1].startswith("hint: try again in a moment")
    assert "internal server error" not in down.err and "Traceback" not in down.err

    # However many requests come in while it is down, the log says so once.
    first = len(log_lines(home))
    for _ in range(REQUESTS):
        assert "the database is unreachable" in sf("job", "ls").err
    grown = log_lines(home)[first:]
    assert len(grown) <= 3, grown  # the outage (if not said yet), the lost leadership
    said = [line for line in log_lines(home) if "is unreachable" in line]
    assert len(said) == 1, said
    assert not any("Traceback" in line for line in log_lines(home))

    again = script(own_cluster, "start")
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip().splitlines()[-1] == url_of_db, again.stderr  # same port and data
    back = sf("job", "ls")
    assert back.code == 0, back.err
    eventually(lambda: any("answers again (" in line for line in log_lines(home)), "the return")
    assert len([line for line in log_lines(home) if "answers again (" in line]) == 1
    # and the loops run again: this process is elected once more
    eventually(lambda: sum("elected leader" in line for line in log_lines(home)) == 2, "a leader")
