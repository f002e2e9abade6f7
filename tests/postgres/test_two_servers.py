"""Two server processes on one PostgreSQL: both serve the API, one leads, and a leader killed
with ``kill -9`` halfway through 200 submissions loses nothing and starts nothing twice."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from starforge.client import config
from starforge.client.http import Client
from starforge.contract.api import SubmitRequest
from starforge.contract.jobspec import FileEntry, Manifest
from starforge.server.db.engine import make_engine, make_sessions
from starforge.server.services.access import users
from tests.server.factories import spec

pytestmark = pytest.mark.postgres

TOKEN = "alice-two-servers-token"
RUNNER = Path(__file__).with_name("quick_runner.py")
INVENTORY = [{"name": f"h200-{i}", "series": "h200", "gpus": 8} for i in range(1, 5)]
SUBMISSIONS = 200


@dataclass
class Server:
    home: Path
    proc: subprocess.Popen[bytes]
    url: str = ""

    def client(self) -> Client:
        return Client(self.url, token=TOKEN, timeout=60.0)

    def leads(self) -> bool:
        with self.client() as c:
            return c.info().leader


def eventually(check: Callable[[], bool], what: str, limit_s: float = 120.0) -> None:
    deadline = time.monotonic() + limit_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.fixture
def cluster(pg_url: str, tmp_path: Path) -> Iterator[tuple[list[Server], Path]]:
    """Two servers (own homes, one database, one storage root) and the file runners log to."""
    engine = make_engine(pg_url)  # the fixture's database is at head: add the user both serve
    with make_sessions(engine).begin() as session:
        users.ensure_user(session, "alice", TOKEN)
    engine.dispose()
    starts = tmp_path / "starts.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("STARFORGE_")}
    env["STARFORGE_CONTAINERS"] = "none"  # jobs on the host: the images live in no registry
    env["SF_TEST_STARTS"] = str(starts)
    servers = []
    for name in ("a", "b"):
        home = tmp_path / name
        home.mkdir()
        settings = {
            "database_url": pg_url,
            "storage_root": str(tmp_path / "storage"),
            "embedded": False,
            "inventory": INVENTORY,
            "runner_command": [sys.executable, str(RUNNER)],
            "heartbeat_s": 1.0,
            "lost_after_s": 60.0,
        }
        (home / "server.yaml").write_text(yaml.safe_dump(settings))
        proc = subprocess.Popen(
            [sys.executable, "-m", "starforge.server", "--home", str(home)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=(home / "server.err").open("wb"),
            start_new_session=True,
        )
        servers.append(Server(home, proc))
    try:
        for server in servers:
            eventually(lambda s=server: config.read_server_file(s.home) is not None, "a server")
            info = config.read_server_file(server.home)
            assert info is not None
            server.url = str(info["url"])
        yield servers, starts
    finally:
        for server in servers:
            if server.proc.poll() is None:
                server.proc.send_signal(signal.SIGTERM)
        for server in servers:
            try:
                server.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.proc.kill()
                server.proc.wait()


def submit(client: Client, digest: str, size: int) -> str:
    entry = FileEntry(path="experiments/exp/train.sh", sha256=digest, size=size)
    request = SubmitRequest(
        spec=spec(profiles=["h200:1"]),
        manifest=Manifest(files=[entry]),
        idempotency_key=uuid.uuid4().hex,
    )
    return client.submit(request).run_id


def test_a_leader_killed_halfway_through_200_submissions_loses_none_and_starts_none_twice(
    cluster: tuple[list[Server], Path], tmp_path: Path
) -> None:
    servers, starts = cluster
    eventually(lambda: sum(s.leads() for s in servers) == 1, "one of the two to lead", 30)
    leader = next(s for s in servers if s.leads())
    follower = next(s for s in servers if s is not leader)
    script = tmp_path / "train.sh"
    script.write_bytes(b"echo hello\n")
    digest = hashlib.sha256(script.read_bytes()).hexdigest()
    with leader.client() as c:
        c.upload_blob(digest, script)  # one storage root: the follower sees the blob too

    run_ids: list[str] = []
    with leader.client() as to_leader, follower.client() as to_follower:
        for i in range(SUBMISSIONS // 2):  # spread over both processes
            run_ids.append(submit(to_leader if i % 2 else to_follower, digest, 3))
        eventually(lambda: starts.exists() and starts.read_text().count("\n") >= 20, "starts")
        leader.proc.send_signal(signal.SIGKILL)  # halfway: mid-flight, nothing flushed
        leader.proc.wait()
        for _ in range(SUBMISSIONS - len(run_ids)):  # the rest go to the one still up
            run_ids.append(submit(to_follower, digest, 3))
        eventually(follower.leads, "the follower to take over", 15)

        def all_final() -> bool:
            views = to_follower.list_runs(limit=500).runs
            return sum(v.status in ("succeeded", "failed", "stopped") for v in views) >= len(
                run_ids
            )

        eventually(all_final, "every run to end", 240)
        views = {v.run_id: v for v in to_follower.list_runs(limit=500).runs}

    assert sorted(views) == sorted(run_ids)  # none lost
    odd = {
        i: (v.status, v.reason, v.end_reason) for i, v in views.items() if v.status != "succeeded"
    }
    assert Counter(v.status for v in views.values()) == {"succeeded": SUBMISSIONS}, odd
    lines = [line.split() for line in starts.read_text().splitlines()]
    started = Counter(run_id for run_id, _, _ in lines)
    assert set(started) == set(run_ids)
    assert max(started.values()) == 1  # one runner per run: nothing dispatched twice
    assert {attempt for _, attempt, _ in lines} == {"1"}  # attempt 1 only: nothing retried
