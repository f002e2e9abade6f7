"""The runner's courier against a real server: reports survive an unreachable endpoint (the
beacon leads to the server), heartbeats land, and a server that ended the attempt fences it.

The server runs ``tests/server/fake_runner.py`` as its runner, so the run's attempt exists with
its binding; the Reporter under test then speaks for that attempt's node. The fixture stops every
run before it stops the server, so no fake runner outlives its test.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from starforge.catalog.loader import get_method
from starforge.client.sender import read_beacon
from starforge.contract.env import Binding
from starforge.contract.layout import RunLayout
from starforge.contract.states import EndReason, JobStatus
from starforge.runner.report import Reporter, runner_record_path, spool_dir
from tests.server.factories import eventually, group_exists
from tests.server.test_integration import FAKE_RUNNER, Server, start_server, status_of

pytestmark = pytest.mark.integration


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    home = tmp_path / "home"
    home.mkdir()
    config = {
        "inventory": [{"name": "box", "series": "h200", "gpus": 8}],
        "runner_command": [sys.executable, str(FAKE_RUNNER)],
        "heartbeat_s": 0.2,
    }
    (home / "server.yaml").write_text(yaml.safe_dump(config))
    srv = start_server(home)
    yield srv
    if srv.proc.poll() is None:
        end_every_run(srv)
        srv.terminate()


def end_every_run(srv: Server) -> None:
    """Stop what the test left running: the runners are the server's children's process groups,
    which outlive the server, so they are ended through the platform before it goes."""
    done = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED, JobStatus.PAUSED}

    def left(c: httpx.Client) -> list[str]:
        runs = c.get("/runs", params={"limit": 1000}).json()["runs"]
        return [r["run_id"] for r in runs if JobStatus(r["status"]) not in done]

    with srv.client() as c:
        for run_id in left(c):
            c.post(f"/runs/{run_id}/stop")
        eventually(lambda: not left(c), what="every run of the test to end")


def submit(c: httpx.Client, key: str) -> str:
    data = b"#!/bin/bash\necho hello\n"
    digest = hashlib.sha256(data).hexdigest()
    assert c.put(f"/blobs/{digest}", content=data).status_code == 201
    spec = {
        "project": "proj",
        "experiment": "exp",
        "method": get_method("custom/custom").ref().model_dump(),
        "profiles": ["h200:8"],
        "image": "registry.example/train:v1",
        "provenance": {"git_commit": "b" * 40, "client_version": "0.1.0"},
        "observability_url": "https://wandb.example/proj",
    }
    files = [{"path": "experiments/exp/train.sh", "sha256": digest, "size": len(data)}]
    body = {"spec": spec, "manifest": {"files": files}, "idempotency_key": key}
    resp = c.post("/jobs", json=body)
    assert resp.status_code == 201, resp.text
    return str(resp.json()["run_id"])


def running_binding(server: Server, key: str) -> Binding:
    with server.client() as c:
        run_id = submit(c, key)
        eventually(lambda: status_of(c, run_id) == "running", what="the fake runner")
        run_dir = Path(c.get(f"/runs/{run_id}").json()["run_dir"])
    data = json.loads(RunLayout(run_dir).binding(1, 0).read_text())
    return Binding.model_validate(data)


def test_reports_to_a_dead_endpoint_follow_the_beacon_and_arrive_in_order(server: Server) -> None:
    b = running_binding(server, "reporter-beacon")
    beacon = read_beacon(b.storage_root)
    assert beacon is not None and beacon.url == server.url and beacon.heartbeat_s == 0.2
    stale = b.model_copy(update={"endpoint": "http://127.0.0.1:9"})  # the server moved away
    said: list[str] = []
    reporter = Reporter(stale, said.append)
    reporter.start()
    reporter.send("starting")
    reporter.send("running")
    assert reporter.close(patience_s=60)
    assert reporter.url == server.url and not reporter.fenced
    assert any("the server moved to" in s for s in said)
    assert reporter.sender.stats.points_sent == 2 and reporter.sender.stats.points_rejected == 0
    assert not spool_dir(b).exists()  # nothing was left undelivered
    with server.client() as c:
        view = c.get(f"/runs/{b.run_id}").json()
    assert view["status"] == "running" and view["attempts"][0]["heartbeat_at"] is not None


def test_a_quick_starts_starting_and_running_go_out_in_one_request(server: Server) -> None:
    b = running_binding(server, "reporter-batch")
    reporter = Reporter(b, lambda _: None)
    reporter.start()
    reporter.send("starting", at_once=False)
    reporter.send("running")
    assert reporter.close(patience_s=60) and not reporter.fenced
    stats = reporter.sender.stats
    assert (stats.points_sent, stats.batches_sent, stats.points_rejected) == (2, 1, 0)
    with server.client() as c:
        assert c.get(f"/runs/{b.run_id}").json()["status"] == "running"


def test_a_job_that_ends_at_once_reports_running_and_its_exit_in_one_request(
    server: Server,
) -> None:
    b = running_binding(server, "reporter-quick")
    reporter = Reporter(b, lambda _: None)
    reporter.start()
    reporter.send("running", at_once=False)  # what the runner queues when the job starts
    reporter.send("exited", exit_code=0, end_reason=EndReason.COMPLETED)
    assert reporter.close(patience_s=60) and not reporter.fenced
    stats = reporter.sender.stats
    assert (stats.points_sent, stats.batches_sent, stats.points_rejected) == (2, 1, 0)
    with server.client() as c:
        view = c.get(f"/runs/{b.run_id}").json()
    assert (view["status"], view["exit_code"]) == ("succeeded", 0)
    assert [e["dst"] for e in view["events"]][-2:] == ["running", "succeeded"]
    # The reporter spoke for the fake runner, which still runs: the run being over, no stop
    # reaches it, so the test ends it (its group), as it ends every process it started.
    pgid = int(view["attempts"][-1]["executor_ref"].removeprefix("local:"))
    os.killpg(pgid, signal.SIGTERM)
    eventually(lambda: not group_exists(pgid), what="the fake runner to end")


def test_a_spooled_report_a_newer_runner_wrote_is_delivered_without_its_unknown_fields(
    server: Server,
) -> None:
    b = running_binding(server, "reporter-newer-spool")
    # What a runner of a later version left undelivered: its exit, with a field this one lacks.
    spooled = {"attempt": 1, "node_rank": 0, "event": "exited", "exit_code": 0}
    spooled |= {"end_reason": "completed", "message": "", "gpu_seconds": 12.5}
    spool_dir(b).mkdir(parents=True, exist_ok=True)
    (spool_dir(b) / "spool-newer-1-0123abcd.jsonl").write_text(json.dumps(spooled) + "\n")
    reporter = Reporter(b, lambda _: None)
    reporter.start()
    assert reporter.close(patience_s=60) and not reporter.fenced
    stats = reporter.sender.stats
    assert (stats.points_replayed, stats.points_rejected) == (1, 0), stats.last_error
    with server.client() as c:
        view = c.get(f"/runs/{b.run_id}").json()
    assert (view["status"], view["exit_code"]) == ("succeeded", 0)
    pgid = int(view["attempts"][-1]["executor_ref"].removeprefix("local:"))
    os.killpg(pgid, signal.SIGTERM)  # the fake runner the reporter spoke for (see above)
    eventually(lambda: not group_exists(pgid), what="the fake runner to end")


def test_a_runner_whose_attempt_the_server_ended_is_fenced(server: Server) -> None:
    b = running_binding(server, "reporter-fence")
    with server.client() as c:
        assert c.post(f"/runs/{b.run_id}/stop").json()["accepted"]
        eventually(lambda: status_of(c, b.run_id) == "stopped", what="the stop")
    fenced = threading.Event()
    reporter = Reporter(b, lambda _: None, on_fenced=lambda why: fenced.set())
    reporter.start()  # its first heartbeat goes out one interval (0.2 s here) later
    assert fenced.wait(timeout=60)
    reporter.close(patience_s=5)
    assert reporter.fenced


def test_without_an_endpoint_a_runner_reports_nothing_and_writes_no_spool(tmp_path: Path) -> None:
    b = Binding(
        run_id="r-0000000001",
        attempt=1,
        user="u",
        storage_root=str(tmp_path),
        run_dir=str(tmp_path / "run"),
        work_dir=str(tmp_path / "run" / "work"),
        out_dir=str(tmp_path / "run" / "out"),
        log_path=str(tmp_path / "run" / "logs" / "attempt-1.log"),
    )
    reporter = Reporter(b, lambda _: None)
    reporter.start()
    reporter.send("starting")
    assert reporter.close() and not spool_dir(b).exists()


def test_the_runner_records_who_runs_the_node_before_anything_else(tmp_path: Path) -> None:
    from tests.runner.test_runner import make_run

    bp = make_run(tmp_path, "echo hi\n")
    proc = subprocess.run(
        [sys.executable, "-m", "starforge.runner", str(bp)], start_new_session=True, check=False
    )
    assert proc.returncode == 0
    binding = Binding.model_validate_json(bp.read_text())
    record = json.loads(runner_record_path(binding).read_text())
    assert record["pid"] == record["pgid"] != os.getpid()


def test_a_fenced_runner_terminates_its_training(tmp_path: Path) -> None:
    from starforge.runner.main import Runner

    b = Binding(
        run_id="r-0000000001",
        attempt=1,
        user="u",
        storage_root=str(tmp_path),
        run_dir=str(tmp_path / "run"),
        work_dir=str(tmp_path / "run" / "work"),
        out_dir=str(tmp_path / "run" / "out"),
        log_path=str(tmp_path / "log"),
    )
    with open(tmp_path / "log", "ab") as log:
        runner = Runner(b, log)
        runner.child = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(600)"], stdout=log, stderr=log
        )
        runner.on_fenced("the server says attempt 1 is over")
        assert runner.child.wait(timeout=30) == -15  # SIGTERM: the training saves and exits
    assert runner.terminating
