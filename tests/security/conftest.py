"""Fixtures of the attacks on the API.

``client``: the app through FastAPI's TestClient (no sockets) with two ordinary users, ``alice``
and ``bob``, and an admin, ``root``; small body limits so an over-limit body stays cheap to send.
``live``: a real server process on 127.0.0.1 in its own home (for what only a real process
shows: its memory, a body it never reads), with the same two ordinary users.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from starforge.contract.api import API_PREFIX
from starforge.server.app import create_app
from starforge.server.runtime import Runtime, build_runtime
from starforge.server.services.access import users
from starforge.server.settings import Settings, load_settings
from tests.server.factories import INVENTORY, PROFILES, TOKENS, FakeExecutor, eventually

ROOT_TOKEN = "root-token"
ALICE = {"Authorization": f"Bearer {TOKENS['alice']}"}
BOB = {"Authorization": f"Bearer {TOKENS['bob']}"}
ROOT = {"Authorization": f"Bearer {ROOT_TOKEN}"}
LIMIT = 64 * 1024  # every body limit of ``client``'s server


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("STARFORGE_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("STARFORGE_CONTAINERS", "none")  # jobs on the host (no registry)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings(
        tmp_path / "home",
        inventory=INVENTORY,
        profiles=PROFILES,
        url="http://127.0.0.1:9999",
        embedded=False,
        max_body_bytes=LIMIT,
        max_ingest_bytes=LIMIT,
        max_submit_bytes=LIMIT,
        max_blob_bytes=LIMIT,
        # Its jobs (a fake executor's) share the server's identity: it opts out of the refusal
        # of members' runs on such a server (services/access/isolation.py), which these tests do not
        # test; tests/security/test_run_identities.py does.
        isolation="none",
    )


def add_users(rt: Runtime) -> None:
    with rt.transaction() as session:
        for name, token in {**TOKENS, "root": ROOT_TOKEN}.items():
            users.ensure_user(session, name, token)
        users.make_admin(session, "root")


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with client_for(settings) as c:
        yield c


def runtime(client: TestClient) -> Runtime:
    return client.app.state.runtime  # type: ignore[attr-defined,no-any-return]


def wire(resp: Any) -> dict[str, Any]:
    """The error body, which must be in the project's format whatever went wrong."""
    body = resp.json()
    assert set(body) == {"code", "message", "hint", "details"}, body
    return dict(body)


@dataclass
class Live:
    url: str
    pid: int
    home: Path

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    home = tmp_path_factory.mktemp("sec-home")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STARFORGE_")}
    env["STARFORGE_CONTAINERS"] = "none"  # jobs on the host: the images live in no registry
    env["STARFORGE_ISOLATION"] = "none"  # as `settings` above
    rt = build_runtime(load_settings(home))
    add_users(rt)
    rt.engine.dispose()
    log = (home / "stdout.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "starforge.server", "--home", str(home), "--port", "0"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    info = home / "server" / "server.json"
    try:
        eventually(lambda: info.is_file() or proc.poll() is not None, what="the server's start")
        assert proc.poll() is None, (home / "stdout.log").read_text()
        yield Live(url=json.loads(info.read_text())["url"], pid=proc.pid, home=home)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


@contextlib.contextmanager
def client_for(settings: Settings) -> Iterator[TestClient]:
    """A started app for ``settings`` (its lifespan ran), for tests of what happens at start."""
    app = create_app(settings, executor=FakeExecutor(), run_loops=False)
    with TestClient(app, base_url="http://testserver" + API_PREFIX) as c:
        rt: Runtime = app.state.runtime
        rt.pick_port = lambda: 40000  # no sockets in unit tests
        add_users(rt)
        yield c
