"""No curve is lost when the server is down as a run ends, none stored twice: a real server,
runner and job (``starforge.report``), the server killed with SIGKILL while the job trains.

The job logs 1,000 steps the server stores, then (the server killed meanwhile) 2,000 more that
it can only spool. Either its runner sends the spool once the server is back (it keeps trying
for ``report_drain_s``), or, the server back only after the runner gave up and the run ended
while nobody listened, the server takes the spool from the run's folder when it ends the run.
Either way every step of every key is stored exactly once, with the value the job logged.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from starforge.cli.main import main
from starforge.client import config
from starforge.client.http import Client
from starforge.contract.layout import RunLayout
from starforge.project import experiments
from starforge.project.lab import Lab
from tests.conftest import Result, commit_all
from tests.integration.conftest import embedded_server, wait_for

pytestmark = pytest.mark.integration
IMAGE = "registry.example/train:v1"
STEPS, FIRST = 3000, 1000

JOB = """#!/usr/bin/env bash
set -euo pipefail
python - <<'PY'
import pathlib, time
import starforge.report as report

for step in range(STEPS):
    if step == FIRST:
        assert report.flush(60), "the first steps did not reach the server"
        print("[job] first steps stored", flush=True)
        while not pathlib.Path("GO").exists():  # the test kills the server meanwhile
            time.sleep(0.02)
    report.log({"loss": 1.0 / (step + 1), "acc": step / STEPS}, step=step)
report.finish(timeout_s=1.0)  # the server is down: the rest goes to the spool
print("[job] done", flush=True)
PY
"""


@pytest.fixture(scope="module")
def server_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    settings = {"heartbeat_s": 0.5, "lost_after_s": 60, "report_drain_s": 0.5}
    with embedded_server(tmp_path_factory.mktemp("sf-home"), settings) as home:
        yield home


def restart_with(home: Path, **settings: object) -> None:
    """The module's server stopped and started again with ``settings`` in its server.yaml."""
    path = home / "server.yaml"
    path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), **settings}))
    assert main(["server", "stop"]) == 0
    assert main(["server", "start"]) == 0


def kill_9_server(home: Path) -> None:
    info = config.read_server_file(home)
    assert info is not None
    os.kill(int(str(info["pid"])), signal.SIGKILL)
    url = str(info["url"])
    deadline = time.monotonic() + 60
    while True:  # until it no longer answers (its port closed with it)
        try:
            httpx.get(f"{url}/api/v1/health", timeout=1.0)
        except httpx.HTTPError:
            return
        assert time.monotonic() < deadline, "the killed server still answers"
        time.sleep(0.05)


def wait_until(check: Callable[[], bool], what: str, limit_s: float = 180.0) -> None:
    deadline = time.monotonic() + limit_s
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def start_job(sf: Callable[..., Result], new_lab: Callable[..., Lab], go: Path) -> tuple[str, Path]:
    lab = new_lab()
    experiments.new_experiment(lab, "rep", "custom/custom")
    folder = lab.root / "experiments" / "rep"
    script = JOB.replace("STEPS", str(STEPS)).replace("FIRST", str(FIRST)).replace("GO", str(go))
    (folder / "train.sh").write_text(script)
    (folder / "config.yaml").write_text("starforge:\n  observability: platform\n")
    commit_all(lab.root, "add rep")
    got = sf("submit", "rep", "--profile", "h200:1", "--image", IMAGE, "--json", cwd=lab.root)
    assert got.code == 0, got.err
    body = got.json()
    assert isinstance(body, dict)
    run_id = str(body["run_id"])
    view = sf("job", "status", run_id, "--json").json()
    assert isinstance(view, dict)
    return run_id, Path(str(view["run_dir"]))


def log_of(run_dir: Path) -> str:
    with contextlib.suppress(OSError):
        return RunLayout(run_dir).log(1).read_text()
    return ""


def stored_exactly_once(run_id: str) -> None:
    info = config.read_server_file()
    assert info is not None
    with Client(str(info["url"]), token=config.read_local_token()) as client:
        view = client.metrics(run_id, max_points=100_000)
    series = {s.key: s for s in view.series}
    assert sorted(series) == ["acc", "loss"]
    for key, value in (("loss", lambda s: 1.0 / (s + 1)), ("acc", lambda s: s / STEPS)):
        got = series[key]
        assert (got.count, got.downsampled) == (STEPS, False)
        assert got.steps == list(range(STEPS))
        assert got.values == [value(s) for s in range(STEPS)]


def test_a_run_that_ends_while_the_server_is_down_keeps_every_point_once(
    sf: Callable[..., Result], new_lab: Callable[..., Lab], server_home: Path, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    run_id, run_dir = start_job(sf, new_lab, go)
    wait_until(lambda: "[job] first steps stored" in log_of(run_dir), "the first steps")
    kill_9_server(server_home)
    go.touch()
    # The job spools what it could not send, its runner tries for report_drain_s and gives up,
    # and the attempt ends (its exit record written) with nobody listening.
    wait_until(lambda: "for the server, which stores them" in log_of(run_dir), "the runner")
    exit_record = RunLayout(run_dir).exit_record(1, 0)
    wait_until(exit_record.exists, "the exit record")
    spool = RunLayout(run_dir).report_spool
    assert any(spool.iterdir())

    assert main(["server", "start"]) == 0
    view = wait_for(sf, run_id, {"succeeded", "failed"})
    assert view["status"] == "succeeded", log_of(run_dir)[-3000:]
    stored_exactly_once(run_id)
    wait_until(lambda: not any(spool.iterdir()), "the stored spool to be removed")


def test_the_runner_sends_the_spool_when_the_server_is_back_before_it_gives_up(
    sf: Callable[..., Result], new_lab: Callable[..., Lab], server_home: Path, tmp_path: Path
) -> None:
    restart_with(server_home, report_drain_s=300)
    go = tmp_path / "go"
    run_id, run_dir = start_job(sf, new_lab, go)
    wait_until(lambda: "[job] first steps stored" in log_of(run_dir), "the first steps")
    kill_9_server(server_home)
    go.touch()
    wait_until(lambda: "[job] done" in log_of(run_dir), "the job's end")
    assert main(["server", "start"]) == 0  # while the runner keeps trying

    view = wait_for(sf, run_id, {"succeeded", "failed"})
    assert view["status"] == "succeeded", log_of(run_dir)[-3000:]
    log = log_of(run_dir)
    sent = next(ln for ln in log.splitlines() if "the job had spooled" in ln)
    assert sent.endswith(f"sent {2 * (STEPS - FIRST)} point(s) the job had spooled")
    stored_exactly_once(run_id)
    assert not any(RunLayout(run_dir).report_spool.iterdir())
