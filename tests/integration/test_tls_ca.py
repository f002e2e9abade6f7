"""A lab's own CA, set once on each side: ``sf`` trusts the server by ``--ca-file`` (or
``STARFORGE_CA_FILE``, or the CA ``sf login`` kept), and the server hands its ``tls_ca_file`` down
to its runners (the binding) and their jobs (``STARFORGE_CA_FILE``). A runner that cannot reach
its server, for a refused certificate or a wrong address, fails the attempt at its start and
says why, instead of training unseen.

Real server processes (``python -m starforge.server``, as a lab runs it) serving HTTPS on
127.0.0.1 with a certificate signed by a CA the test makes with ``openssl``; real runners, real
jobs reporting through ``starforge.report``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from starforge.project import experiments
from starforge.project.lab import Lab
from tests.conftest import Result, commit_all
from tests.integration.conftest import stop_every_run, wait_for
from tests.tls_certs import LabCA, make_lab_ca

pytestmark = [
    pytest.mark.integration,
    pytest.mark.client,
    pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed"),
]
IMAGE = "registry.example/train:v1"
REPORTING_JOB = """#!/usr/bin/env bash
set -euo pipefail
echo "trusts: ${STARFORGE_CA_FILE:-the default bundle}"
python - <<'PY'
import starforge.report as report

for step in range(5):
    report.log({"loss": 1.0 / (step + 1)}, step=step)
report.finish()
PY
"""


@dataclass(frozen=True)
class Served:
    url: str
    token: str
    home: Path


@pytest.fixture(scope="module")
def lab_ca(tmp_path_factory: pytest.TempPathFactory) -> LabCA:
    return make_lab_ca(tmp_path_factory.mktemp("lab-ca"))


@contextmanager
def talking_to(served: Served, ca: Path | None = None) -> Iterator[None]:
    """This process's ``sf`` talks to ``served`` (trusting ``ca``) for the block."""
    names = ("STARFORGE_SERVER", "STARFORGE_TOKEN", "STARFORGE_CA_FILE")
    saved = {k: os.environ.get(k) for k in names}
    os.environ.update(STARFORGE_SERVER=served.url, STARFORGE_TOKEN=served.token)
    os.environ.pop("STARFORGE_CA_FILE", None)
    if ca is not None:
        os.environ["STARFORGE_CA_FILE"] = str(ca)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def serve(home: Path, settings: dict[str, Any], *args: str, ca: Path | None) -> Iterator[Served]:
    """``python -m starforge.server`` in ``home`` with ``settings`` as its server.yaml; at the
    end its runs are stopped (with ``sf`` trusting ``ca``) and the server is stopped."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "server.yaml").write_text(yaml.safe_dump(settings))
    port = free_port()  # its own, not server.json's: that names the settings' url when set
    scheme = "https" if "--tls-cert" in args else "http"
    cmd = [sys.executable, "-m", "starforge.server", "--home", str(home), "--port", str(port)]
    with (home / "server.out").open("wb") as out:
        proc = subprocess.Popen([*cmd, *args], stdout=out, stderr=subprocess.STDOUT)
    try:
        info, token = home / "server" / "server.json", home / "server" / "local-token"
        deadline = time.monotonic() + 120
        while not (info.exists() and token.exists()) and proc.poll() is None:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        assert proc.poll() is None, (home / "server.out").read_text()
        served = Served(f"{scheme}://127.0.0.1:{port}", token.read_text().strip(), home)
        yield served
        with talking_to(served, ca):
            stop_every_run()
    finally:
        proc.terminate()
        proc.wait(timeout=60)


@pytest.fixture
def sf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home of its own: these tests start their own servers, not the module's embedded one."""
    home = tmp_path / "sf-home"
    monkeypatch.setenv("STARFORGE_HOME", str(home))
    for name in ("STARFORGE_SERVER", "STARFORGE_TOKEN", "STARFORGE_CA_FILE"):
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture(scope="module")
def lab_server(tmp_path_factory: pytest.TempPathFactory, lab_ca: LabCA) -> Iterator[Served]:
    """A lab's server: HTTPS with a certificate of the lab's CA, ``tls_ca_file`` set."""
    home = tmp_path_factory.mktemp("lab-server")
    tls = ("--tls-cert", str(lab_ca.cert), "--tls-key", str(lab_ca.key))
    with serve(home, {"tls_ca_file": str(lab_ca.ca)}, *tls, ca=lab_ca.ca) as served:
        yield served


def lab_with_job(new_lab: Callable[..., Lab], script: str) -> Lab:
    made = new_lab()
    experiments.new_experiment(made, "rep", "custom/custom")
    folder = made.root / "experiments" / "rep"
    (folder / "train.sh").write_text(script)
    (folder / "config.yaml").write_text("starforge:\n  observability: platform\n")
    commit_all(made.root, "add rep")
    return made


def submit(sf: Callable[..., Result], made: Lab, *flags: str) -> str:
    got = sf(*flags, "submit", "rep", "--profile", "h200:1", "--image", IMAGE, "--json",
             cwd=made.root)  # fmt: skip
    assert got.code == 0, got.err
    body = got.json()
    assert isinstance(body, dict)
    return str(body["run_id"])


def test_sf_trusts_the_lab_ca_given_by_ca_file_and_names_the_setting_without_it(
    sf: Callable[..., Result],
    lab_server: Served,
    lab_ca: LabCA,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STARFORGE_SERVER", lab_server.url)
    monkeypatch.setenv("STARFORGE_TOKEN", lab_server.token)
    refused = sf("whoami")
    assert refused.code == 1
    first = refused.err.splitlines()[0]
    assert first.startswith("error: the server at https://127.0.0.1:"), refused.err
    assert "does not trust" in first and "--ca-file" in first and "STARFORGE_CA_FILE" in first
    assert "Traceback" not in refused.err and "check that it runs" not in refused.err

    assert sf("--ca-file", str(lab_ca.ca), "whoami").code == 0
    monkeypatch.setenv("STARFORGE_CA_FILE", str(lab_ca.ca))
    assert sf("whoami").code == 0

    # Signed in once with the CA, later commands trust the server with nothing set.
    monkeypatch.delenv("STARFORGE_CA_FILE")
    monkeypatch.delenv("STARFORGE_SERVER")
    monkeypatch.delenv("STARFORGE_TOKEN")
    login = sf("--ca-file", str(lab_ca.ca), "login", "--server", lab_server.url,
               "--token", lab_server.token)  # fmt: skip
    assert login.code == 0, login.err
    me = sf("whoami", "--json")
    assert me.code == 0, me.err
    assert isinstance(body := me.json(), dict) and body["server"] == lab_server.url


def test_a_missing_ca_file_is_one_line_naming_it(
    sf: Callable[..., Result], lab_server: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STARFORGE_SERVER", lab_server.url)
    monkeypatch.setenv("STARFORGE_TOKEN", lab_server.token)
    got = sf("--ca-file", str(tmp_path / "nope.pem"), "whoami")
    assert got.code == 2
    assert f"cannot use the CA file {tmp_path / 'nope.pem'}" in got.err.splitlines()[0]


def test_a_job_on_the_lab_server_reports_its_lifecycle_and_metrics_through_its_ca(
    sf: Callable[..., Result],
    new_lab: Callable[..., Lab],
    lab_server: Served,
    lab_ca: LabCA,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STARFORGE_SERVER", lab_server.url)
    monkeypatch.setenv("STARFORGE_TOKEN", lab_server.token)
    made = lab_with_job(new_lab, REPORTING_JOB)
    run_id = submit(sf, made, "--ca-file", str(lab_ca.ca))
    monkeypatch.setenv("STARFORGE_CA_FILE", str(lab_ca.ca))
    view = wait_for(sf, run_id, {"succeeded", "failed"})
    assert view["status"] == "succeeded", view
    # The runner reached the server (its reports moved the run), and so did the job's SDK.
    assert [e["dst"] for e in view["events"]] == ["queued", "starting", "running", "succeeded"]  # type: ignore[union-attr, index]
    series = sf("job", "metrics", run_id, "--json").json()
    assert isinstance(series, dict)
    loss = {s["key"]: s for s in series["series"]}["loss"]  # type: ignore[index, union-attr]
    assert loss["count"] == 5 and loss["steps"] == [0, 1, 2, 3, 4]
    log = sf("job", "logs", run_id, "-n", "0", "--no-follow").out
    assert f"/{run_id}/out/.starforge/ca.pem" in log  # the job's own copy of the server's CA
    assert "cannot reach the server" not in log


def test_a_runner_that_does_not_trust_its_server_fails_the_attempt_naming_tls_ca_file(
    sf: Callable[..., Result],
    new_lab: Callable[..., Lab],
    lab_ca: LabCA,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tls = ("--tls-cert", str(lab_ca.cert), "--tls-key", str(lab_ca.key))
    with serve(tmp_path / "server", {}, *tls, ca=lab_ca.ca) as served:  # no tls_ca_file
        monkeypatch.setenv("STARFORGE_SERVER", served.url)
        monkeypatch.setenv("STARFORGE_TOKEN", served.token)
        monkeypatch.setenv("STARFORGE_CA_FILE", str(lab_ca.ca))  # sf itself trusts it
        run_id = submit(sf, lab_with_job(new_lab, REPORTING_JOB))
        view = wait_for(sf, run_id, {"succeeded", "failed"})
        log = sf("job", "logs", run_id, "-n", "0", "--no-follow").out
    assert view["status"] == "failed" and view["end_reason"] == "startup_failed", view
    reason = str(view["reason"])
    assert f"the server at {served.url} has a certificate" in reason, reason
    assert "tls_ca_file in the server's server.yaml" in reason
    assert "trusts:" not in log  # the job never started


def test_a_runner_that_cannot_reach_its_server_fails_the_attempt_naming_the_url(
    sf: Callable[..., Result],
    new_lab: Callable[..., Lab],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"  # a port nothing listens on
    # The address runners are given is wrong (a url: setting they cannot reach); a short
    # heartbeat keeps the runner's patience at its start short.
    settings = {"url": nowhere, "heartbeat_s": 0.2}
    with serve(tmp_path / "server", settings, ca=None) as served:
        monkeypatch.setenv("STARFORGE_SERVER", served.url)
        monkeypatch.setenv("STARFORGE_TOKEN", served.token)
        run_id = submit(sf, lab_with_job(new_lab, REPORTING_JOB))
        view = wait_for(sf, run_id, {"succeeded", "failed"})
        log = sf("job", "logs", run_id, "-n", "0", "--no-follow").out
    assert view["status"] == "failed" and view["end_reason"] == "startup_failed", view
    reason = str(view["reason"])
    assert f"cannot reach the StarForge server at {nowhere}" in reason, reason
    assert "startup failed: the control plane cannot be reached" in log
    assert "trusts:" not in log
