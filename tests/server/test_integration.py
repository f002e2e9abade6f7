"""The real server as a subprocess on 127.0.0.1: upload, submit, read back, stop, restart.

Runners are played by ``fake_runner.py`` (configured through ``runner_command`` in the home's
server.yaml), so these tests exercise the server's processes, sockets and loops without training.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from starforge.catalog.loader import get_method
from starforge.contract.api import API_PREFIX
from starforge.server.executors.local import parse_ref, proc_state

from .factories import eventually

pytestmark = pytest.mark.integration
FAKE_RUNNER = Path(__file__).with_name("fake_runner.py")


@dataclass
class Server:
    home: Path
    proc: subprocess.Popen[bytes]
    url: str
    token: str

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url + API_PREFIX,
            timeout=30,
            headers={"Authorization": f"Bearer {self.token}"},
        )

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


def start_server(home: Path) -> Server:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STARFORGE_")}
    env["STARFORGE_CONTAINERS"] = "none"  # jobs on the host: the images live in no registry
    env["STARFORGE_JOB_USER"] = ""  # jobs as this user: `nobody` cannot enter pytest's tmp dirs
    info = home / "server" / "server.json"
    with open(home / "stderr.log", "ab") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "starforge.server", "--home", str(home)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=err,
            stderr=err,
        )
    eventually(lambda: info.exists() or proc.poll() is not None, limit_s=60, what="server.json")
    assert proc.poll() is None, (home / "stderr.log").read_text()
    data = json.loads(info.read_text())
    assert data["pid"] == proc.pid and data["version"]
    token = (home / "server" / "local-token").read_text().strip()
    return Server(home, proc, data["url"], token)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    config = {
        "inventory": [{"name": "box", "series": "h200", "gpus": 8}],
        "runner_command": [sys.executable, str(FAKE_RUNNER)],
        "stop_grace_s": 20,
    }
    (home / "server.yaml").write_text(yaml.safe_dump(config))
    return home


@pytest.fixture
def server(home: Path) -> Iterator[Server]:
    srv = start_server(home)
    yield srv
    if srv.proc.poll() is None:
        srv.terminate()


def upload_and_submit(c: httpx.Client, key: str) -> dict[str, Any]:
    method = get_method("custom/custom")
    data = b"#!/bin/bash\necho hello\n"
    digest = hashlib.sha256(data).hexdigest()
    missing = c.post("/blobs/missing", json={"digests": [digest]}).json()["missing"]
    for d in missing:
        assert c.put(f"/blobs/{d}", content=data).status_code == 201
    assert c.post("/blobs/missing", json={"digests": [digest]}).json() == {"missing": []}
    body = {
        "spec": {
            "project": "proj",
            "experiment": "exp",
            "method": method.ref().model_dump(),
            "profiles": ["h200:8"],
            "image": "registry.example/train:v1",
            "provenance": {"git_commit": "b" * 40, "client_version": "0.1.0"},
            "observability_url": "https://wandb.example/proj",
        },
        "manifest": {
            "files": [{"path": "experiments/exp/train.sh", "sha256": digest, "size": len(data)}]
        },
        "idempotency_key": key,
    }
    resp = c.post("/jobs", json=body)
    assert resp.status_code == 201, resp.text
    return dict(resp.json())


def status_of(c: httpx.Client, run_id: str) -> str:
    return str(c.get(f"/runs/{run_id}").json()["status"])


def test_a_run_is_uploaded_submitted_read_back_and_stopped(server: Server) -> None:
    with server.client() as c:
        assert c.get("/whoami").status_code == 200
        run_id = upload_and_submit(c, "integration-1")["run_id"]
        eventually(lambda: status_of(c, run_id) == "running", what="the runner to report")
        waiting = upload_and_submit(c, "integration-2")
        assert waiting["status"] == "queued"
        eventually(
            lambda: (
                "8 free h200 GPUs: 0 are free on box"
                in c.get(f"/runs/{waiting['run_id']}").json()["reason"]
            ),
            what="a queue reason",
        )

        assert c.post(f"/runs/{waiting['run_id']}/stop").json()["status"] == "stopped"
        assert c.post(f"/runs/{run_id}/stop").json()["status"] == "stopping"
        eventually(lambda: status_of(c, run_id) == "stopped", what="the stop to finish")
        view = c.get(f"/runs/{run_id}").json()
        assert (view["end_reason"], view["exit_code"]) == ("stopped_by_user", 143)
        assert [e["dst"] for e in view["events"]] == [
            "queued",
            "starting",
            "running",
            "stopping",
            "stopped",
        ]
        chunk = c.get(f"/runs/{run_id}/logs").json()
        assert "fake runner: running" in chunk["data"] and chunk["final"]


def test_a_run_outlives_a_server_restart_and_is_stopped_by_the_next(home: Path) -> None:
    first = start_server(home)
    with first.client() as c:
        run_id = upload_and_submit(c, "restart-1")["run_id"]
        eventually(lambda: status_of(c, run_id) == "running", what="the runner to report")
        ref = c.get(f"/runs/{run_id}").json()["attempts"][0]["executor_ref"]
    assert first.terminate() == 0
    assert not (home / "server" / "server.json").exists()
    pid = parse_ref(ref)
    assert proc_state(pid) not in (None, "Z")  # the runner kept running

    second = start_server(home)
    try:
        with second.client() as c:
            assert status_of(c, run_id) == "running"
            assert c.post(f"/runs/{run_id[:6]}/stop").json()["accepted"]
            # The runner reports to the old URL and fails; its exit record finishes the run.
            eventually(lambda: status_of(c, run_id) == "stopped", what="the reconciler")
            assert c.get(f"/runs/{run_id}").json()["exit_code"] == 143
    finally:
        second.terminate()


def test_the_real_runner_runs_a_custom_entrypoint_to_success(tmp_path: Path) -> None:
    home = tmp_path / "real"
    home.mkdir()
    config = {"inventory": [{"name": "box", "series": "h200", "gpus": 8}]}
    (home / "server.yaml").write_text(yaml.safe_dump(config))
    srv = start_server(home)
    try:
        with srv.client() as c:
            run_id = upload_and_submit(c, "real-runner-1")["run_id"]
            eventually(
                lambda: status_of(c, run_id) in {"succeeded", "failed"},
                limit_s=120,
                what="the run to end",
            )
            view = c.get(f"/runs/{run_id}").json()
            chunk = c.get(f"/runs/{run_id}/logs").json()
            assert (view["status"], view["exit_code"]) == ("succeeded", 0), chunk["data"]
            assert "hello" in chunk["data"] and chunk["final"]
    finally:
        srv.terminate()
