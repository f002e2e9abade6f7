"""Earlier releases and this one, together, as users run them (docs/releases.md).

Each earlier release is built from git (tests/previous_release.py: its tag, else the commit in
releases.toml) into a venv of its own, and its own ``sf`` runs as a separate process. Every
release this server still accepts the client of (from ``MIN_CLIENT_VERSION`` on, and always the
newest before this one) is tested, not only the newest: the ``previous`` fixture is parametrized
over them (``previous_release.tested``), one build each, shared by the tests:

- its client against this server: init, new, submit, status, ls, logs, whoami, server status
  work (or, below the oldest client this server accepts, each prints the one-line 426);
- its client below an admin's ``min_client_version``: exactly the one line naming the upgrade;
- this client against its server (started by its own ``sf server start``), for each release
  from ``MIN_SERVER_VERSION`` on;
- every route's request and answer, the binding and the log events, compared by schema
  (tests/wire_compat.py), for the values no run reaches;
- the newest release's runner through an upgrade (the policy promises the previous minor
  release's runners): a run started by its server keeps running while that server stops and
  this one starts on the same home (database migrated), beats to this server, and ends
  ``succeeded``.

No output may hold a traceback. The jobs that must outlive a server wait for a gate file the test
creates, so nothing depends on timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from starforge import __version__
from starforge.cli.main import main
from starforge.contract import answering, versions
from starforge.contract.api import MIN_CLIENT_VERSION, MIN_SERVER_VERSION
from starforge.project.lab import Lab
from tests import previous_release, wire_compat
from tests.client.newer_server import run_view
from tests.conftest import Result, commit_all
from tests.integration.conftest import embedded_server, stop_every_run, wait_for

# Not run again on PostgreSQL: the previous release's servers keep their own SQLite homes.
pytestmark = [pytest.mark.integration, pytest.mark.client]
IMAGE = "registry.example/train:v1"
FINAL = {"succeeded", "failed", "stopped"}


TESTED = previous_release.tested()
NEWEST = previous_release.previous_version()
SERVERS = previous_release.tested(oldest=MIN_SERVER_VERSION)


def release_id(version: str) -> str:
    return f"v{version}"


@pytest.fixture(scope="session", params=TESTED, ids=release_id)
def previous(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> previous_release.Release:
    """An earlier release in its venv: each of ``TESTED`` in turn, or the one a test names by
    ``@pytest.mark.parametrize("previous", ..., indirect=True)``."""
    assert NEWEST is not None, "releases.toml records no release before this one"
    version: str = request.param
    commit = previous_release.commit_of(version)
    if commit is None:
        why = f"release {version}'s commit is not in this clone (a full clone or git fetch --tags)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    shared = os.environ.get("STARFORGE_TEST_INPUTS")  # kept for the test command's second pass
    base = Path(shared) if shared else tmp_path_factory.getbasetemp()
    if not shared and os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # beside the workers' folders: one build for both
    return previous_release.build(version, commit, base / "releases")


@pytest.fixture
def old_sf(previous: previous_release.Release) -> Callable[..., Result]:
    """``sf ARGS`` of the previous release, in ``home``: a process of its own venv."""

    def run(home: Path, *args: str, cwd: Path | None = None) -> Result:
        env = previous_release.deps_env()
        env["STARFORGE_HOME"] = str(home)
        for key in ("STARFORGE_SERVER", "STARFORGE_TOKEN"):
            env.pop(key, None)
        done = subprocess.run(
            [str(previous.sf), *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
        return Result(done.returncode, done.stdout, done.stderr)

    return run


@pytest.fixture
def todays_sf(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Result]:
    """``sf ARGS`` of this release in-process, in ``home`` (set by the test)."""

    def run(*args: str, cwd: Path | None = None) -> Result:
        if cwd is not None:
            monkeypatch.chdir(cwd)
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        assert "Traceback" not in out + err, out + err
        return Result(code, out, err)

    return run


def old_lab(
    old_sf: Callable[..., Result], home: Path, root: Path, gate: Path | None = None
) -> Path:
    """A lab made by the previous release's own ``sf init`` and ``sf new``: one custom job of
    three steps (waiting for ``gate/<run id>`` before its first step when ``gate`` is given)."""
    made = old_sf(home, "init", str(root), "--yes")
    assert made.code == 0, made.err
    made = old_sf(home, "new", "c1", "--method", "custom/custom", cwd=root)
    assert made.code == 0, made.err
    script = root / "experiments" / "c1" / "train.sh"
    text = script.read_text()
    text = text.replace('STEPS="${STEPS:-20}"', 'STEPS="${STEPS:-3}"')
    text = text.replace('STEP_SECONDS="${STEP_SECONDS:-0.1}"', 'STEP_SECONDS="${STEP_SECONDS:-0}"')
    if gate is not None:
        wait = f'while [[ ! -e "{gate}/$FORGE_RUN_ID" ]]; do sleep 0.05; done\n'
        text = text.replace("for (( step = done_step + 1;", wait + "for (( step = done_step + 1;")
    assert 'STEPS="${STEPS:-3}"' in text and (gate is None or str(gate) in text)
    script.write_text(text)
    (root / "experiments" / "c1" / "config.yaml").write_text(
        "starforge:\n  observability: platform\n"
    )
    commit_all(root, "add c1")
    return root


def old_submit(old_sf: Callable[..., Result], home: Path, lab: Path) -> str:
    sent = old_sf(home, "submit", "c1", "--profile", "h200:1", "--image", IMAGE, "--json", cwd=lab)
    assert sent.code == 0, sent.err
    return str(json.loads(sent.out)["run_id"])


def old_wait(
    old_sf: Callable[..., Result], home: Path, run_id: str, statuses: set[str]
) -> dict[str, object]:
    deadline = time.monotonic() + 180
    while True:
        shown = old_sf(home, "job", "status", run_id, "--json")
        assert shown.code == 0, shown.err
        view: dict[str, object] = json.loads(shown.out)
        if view["status"] in statuses or time.monotonic() > deadline:
            return view
        time.sleep(0.2)


def wire_of(python: Path, cwd: Path) -> dict[str, object]:
    """The wire of the StarForge ``python`` imports (tests/wire_schemas.py)."""
    script = previous_release.ROOT / "tests" / "wire_schemas.py"
    done = subprocess.run(
        [str(python), str(script)],
        cwd=cwd,
        env=previous_release.deps_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    loaded: dict[str, object] = json.loads(done.stdout)
    return loaded


@pytest.fixture(scope="session")
def todays_wire(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """This release's wire, read once for every earlier release it is compared with."""
    return wire_of(Path(sys.executable), tmp_path_factory.mktemp("wire"))


def test_every_message_of_either_release_reads_on_the_other_side(
    previous: previous_release.Release, todays_wire: dict[str, object], tmp_path: Path
) -> None:
    """Every route's request and answer, the binding and the log events, compared field by
    field: what the runs below exercise, and the values they never reach (a status, an end
    reason), in each direction the policy promises."""
    old, new = wire_of(previous.python, tmp_path), todays_wire
    clients = not versions.older(previous.version, MIN_CLIENT_VERSION)
    servers = not versions.older(previous.version, MIN_SERVER_VERSION)
    told = answering.unknown_to(previous.version)  # answered to its clients as values they know
    assert wire_compat.breaks(old, new, clients=clients, servers=servers, told_otherwise=told) == []


def test_the_previous_releases_client_works_with_todays_server(
    previous: previous_release.Release,
    old_sf: Callable[..., Result],
    server_home: Path,
    tmp_path: Path,
) -> None:
    assert old_sf(server_home, "--version").out == f"sf {previous.version}\n"
    if versions.older(previous.version, MIN_CLIENT_VERSION):  # the policy changed: one line
        refused = old_sf(server_home, "job", "ls")
        assert (refused.code, refused.out) == (1, "")
        assert refused.err.count("\n") == 1 and "pip install -U" in refused.err
        return
    status = old_sf(server_home, "server", "status")
    assert status.code == 0 and f"version: {__version__}" in status.out, status.err
    lab = old_lab(old_sf, server_home, tmp_path / "old-lab")
    run_id = old_submit(old_sf, server_home, lab)
    view = old_wait(old_sf, server_home, run_id, FINAL)
    assert (view["status"], view["exit_code"]) == ("succeeded", 0)
    listed = old_sf(server_home, "job", "ls", "--json")
    assert listed.code == 0 and run_id in {r["run_id"] for r in json.loads(listed.out)}
    logs = old_sf(server_home, "job", "logs", run_id, "-n", "0")
    assert logs.code == 0 and "step 3/3 loss" in logs.out, logs.err
    for command in (["job", "ls"], ["job", "status", run_id], ["status"], ["whoami"]):
        shown = old_sf(server_home, *command)
        assert (shown.code, shown.err) == (0, ""), (command, shown.err)


def test_below_the_admins_minimum_the_previous_client_prints_one_line_naming_the_upgrade(
    previous: previous_release.Release, old_sf: Callable[..., Result], tmp_path: Path
) -> None:
    (tmp_path / "home").mkdir()
    with embedded_server(tmp_path / "home", {"min_client_version": __version__}) as home:
        lab = old_lab(old_sf, home, tmp_path / "old-lab")
        line = (
            f"error: client {previous.version} is older than {__version__}, the oldest this "
            f"server ({__version__}) accepts: upgrade it with pip install -U "
            f"'starforge>={__version__}'\n"
        )
        for command in (["job", "ls"], ["submit", "c1", "--profile", "h200:1", "--image", IMAGE]):
            refused = old_sf(home, *command, cwd=lab)
            assert (refused.code, refused.out, refused.err) == (1, "", line), command
        # The server's version and the minimum stay readable to the refused client.
        status = old_sf(home, "server", "status", "--json")
        assert status.code == 0, status.err
        assert json.loads(status.out)["version"] == __version__


@pytest.fixture
def old_server(
    old_sf: Callable[..., Result], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """The previous release's embedded server, started by its own ``sf``, in a home this
    process's ``sf`` uses too; its runs and the server are stopped at the end."""
    home = tmp_path / "old-home"
    started = old_sf(home, "server", "start")
    assert started.code == 0, started.err
    monkeypatch.setenv("STARFORGE_HOME", str(home))
    monkeypatch.delenv("STARFORGE_SERVER", raising=False)
    try:
        yield home
    finally:
        stop_every_run()
        old_sf(home, "server", "stop")


@pytest.mark.parametrize("previous", SERVERS, ids=release_id, indirect=True)
def test_todays_client_works_with_the_previous_releases_server(
    previous: previous_release.Release,
    todays_sf: Callable[..., Result],
    old_server: Path,
    custom_lab: Callable[..., Lab],
) -> None:
    status = todays_sf("server", "status", "--json")
    assert status.code == 0, status.err
    shown = json.loads(status.out)
    assert (shown["version"], shown["client"]) == (previous.version, __version__)
    lab = custom_lab(steps=3)
    sent = todays_sf("submit", "c1", "--profile", "h200:1", "--image", IMAGE, "--json",
                     cwd=lab.root)  # fmt: skip
    assert sent.code == 0, sent.err
    run_id = str(json.loads(sent.out)["run_id"])
    view = wait_for(todays_sf, run_id, FINAL)
    assert (view["status"], view["exit_code"]) == ("succeeded", 0)
    listed = todays_sf("job", "ls", "--json")
    assert listed.code == 0 and run_id in {r["run_id"] for r in json.loads(listed.out)}
    logs = todays_sf("job", "logs", run_id, "-n", "0")
    assert logs.code == 0 and "step 3/3 loss" in logs.out, logs.err
    for command in (["job", "ls"], ["job", "status", run_id], ["status"], ["whoami"]):
        shown_now = todays_sf(*command)
        assert shown_now.code == 0, (command, shown_now.err)


def beat_since(sf: Callable[..., Result], run_id: str, since: datetime) -> None:
    """Wait until the run's runner has sent a heartbeat the server took after ``since``."""
    deadline = time.monotonic() + 120
    while True:
        view = sf("job", "status", run_id, "--json").json()
        beat = view["attempts"][-1]["heartbeat_at"]  # type: ignore[call-overload, index]
        if beat and utc(datetime.fromisoformat(beat)) > utc(since):
            return
        assert time.monotonic() < deadline, f"no heartbeat since {since}: {view}"
        time.sleep(0.2)


def utc(when: datetime) -> datetime:
    return when if when.tzinfo else when.replace(tzinfo=UTC)


@pytest.mark.parametrize("previous", [NEWEST], ids=release_id, indirect=True)
def test_the_previous_releases_runner_keeps_reporting_through_an_upgrade(
    previous: previous_release.Release,
    old_sf: Callable[..., Result],
    todays_sf: Callable[..., Result],
    tmp_path: Path,
) -> None:
    home, gate = tmp_path / "home", tmp_path / "gate"
    gate.mkdir()
    lab = old_lab(old_sf, home, tmp_path / "old-lab", gate=gate)
    run_id = ""
    try:
        assert old_sf(home, "server", "start").code == 0
        try:
            run_id = old_submit(old_sf, home, lab)
            assert old_wait(old_sf, home, run_id, {"running", *FINAL})["status"] == "running"
        finally:
            assert old_sf(home, "server", "stop").code == 0
        # The upgrade: this release's server on the same home, while the old runner waits.
        with embedded_server(home):
            status = json.loads(todays_sf("server", "status", "--json").out)
            assert status["version"] == __version__
            beat_since(todays_sf, run_id, datetime.fromisoformat(status["started_at"]))
            (gate / run_id).touch()
            view = wait_for(todays_sf, run_id, FINAL)
            assert (view["status"], view["exit_code"]) == ("succeeded", 0)
            events = [e["dst"] for e in view["events"]]  # type: ignore[union-attr, index]
            assert events == ["queued", "starting", "running", "succeeded"]
            assert len(view["attempts"]) == 1  # type: ignore[arg-type]
            logs = todays_sf("job", "logs", run_id, "-n", "0")
            assert "step 3/3 loss" in logs.out, logs.err
            by_old = old_sf(home, "job", "status", run_id, "--json")
            assert json.loads(by_old.out)["status"] == "succeeded"
    finally:
        if run_id:  # a failed test must not leave the old runner waiting for its gate
            (gate / run_id).touch()


def test_server_status_shows_both_versions_and_the_oldest_client_accepted(
    sf: Callable[..., Result],
) -> None:
    shown = sf("server", "status")
    assert shown.code == 0, shown.err
    lines = {line.split(":", 1)[0].strip(): line.split(":", 1)[1].strip() for line in
             shown.out.splitlines()}  # fmt: skip
    assert lines["version"] == __version__
    assert lines["min_client"] == MIN_CLIENT_VERSION
    assert lines["client"] == __version__
    assert shown.err == ""  # neither side too old for the other


class _NewerServer(BaseHTTPRequestHandler):
    """A release after this one: its run list holds a status this client has never heard of."""

    def do_GET(self) -> None:
        _, wire = run_view()
        wire["status"] = "hibernating"
        body = json.dumps({"runs": [wire]}).encode()
        status = 200 if self.path.startswith("/api/v1/runs") else 404
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def newer_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NewerServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("STARFORGE_SERVER", url)
    monkeypatch.setenv("STARFORGE_TOKEN", "token-of-the-future")
    try:
        yield url
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_an_answer_this_client_cannot_read_is_one_line_naming_the_upgrade(
    todays_sf: Callable[..., Result], newer_server: str
) -> None:
    shown = todays_sf("job", "ls")
    assert (shown.code, shown.out) == (1, "")
    error, hint = shown.err.splitlines()
    assert error.startswith(f"error: sf {__version__} cannot read this RunList: runs.0.status: ")
    assert error.endswith("or 'stopped' (it holds 'hibernating')")
    assert hint.startswith("hint: the server is likely of a release this client cannot read")
    assert "pip install -U starforge" in hint
