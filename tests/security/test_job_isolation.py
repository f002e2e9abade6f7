"""A job is isolated from the platform: the server's folder (database, token files) and settings
are its own (0700 / 0600), and a real server run as root (its default: jobs as
``nobody``), a real runner and a real custom job that tries, from the inside, what a hostile
``train.sh`` would. It must not read its own binding (the runner's token), the server's token
file or another run's binding, must not write outside its run's ``work`` and ``out``, and its
``STARFORGE_TOKEN`` must not post lifecycle events; its run still succeeds and its metrics land.

The storage root and the server's home live in a world-traversable folder under /var/tmp
(pytest's own temporary folders are 0700 to everyone but root, so ``nobody`` could not even
reach its run there, and the test would prove nothing about the permissions the platform sets).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from starforge.cli.main import main
from starforge.contract.errors import RunnerError
from starforge.project import experiments
from starforge.project.lab import Lab
from starforge.runner import jobuser
from starforge.server.settings import Settings
from tests.conftest import Result, commit_all
from tests.integration.conftest import wait_for

from .conftest import client_for

as_root = pytest.mark.skipif(
    os.geteuid() != 0,
    reason="only a root server runs jobs as another user; without root a job runs as the "
    "server's user (docs/security.md says what that means)",
)

IMAGE = "registry.example/train:v1"
PROBE = """#!/usr/bin/env bash
set -u
source "$FORGE_EXP_DIR/probe.env"
echo "probe: user=$(id -un)"
try_read() { if cat "$2" >/dev/null 2>&1; then
    echo "probe: $1=READ"; else echo "probe: $1=no"; fi; }
try_write() { if touch "$2" 2>/dev/null; then
    echo "probe: $1=WROTE"; else echo "probe: $1=no"; fi; }
try_read own-binding "$FORGE_RUN_DIR/state/attempt-1.node-0.binding.json"
try_read token-file "$TOKEN_FILE"
try_read other-binding "$OTHER_BINDING"
try_read server-db "$SERVER_DB"
try_write state "$FORGE_RUN_DIR/state/probe"
try_write storage-root "$FORGE_STORAGE_ROOT/probe"
try_write other-work "$OTHER_WORK/probe"
# What a hostile job would send with the only token it has (curl: any job can).
post() {
    local headers=(-H "X-StarForge-Run-Token: $STARFORGE_TOKEN" -H "Content-Type: application/json")
    local url="$STARFORGE_ENDPOINT/api/v1/runs/$STARFORGE_RUN_ID/$1"
    curl -s -o /dev/null -w '%{http_code}' -X POST "${headers[@]}" --data "$2" "$url"
}
echo "probe: lifecycle=$(post lifecycle '{"attempt": 1, "event": "exited", "exit_code": 0}')"
echo "probe: ingest=$(post ingest '{"attempt": 1, "steps": [{"step": 0, "values": {"probe": 1}}]}')"
echo written > "$FORGE_OUT_DIR/probe.txt" && echo "probe: out=ok"
env > "$FORGE_OUT_DIR/env.txt"
"""
PLAIN = "#!/usr/bin/env bash\necho plain\n"


@pytest.fixture
def open_root() -> Iterator[Path]:
    """A folder every user may traverse (0755 up to /), removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="sf-isolation-", dir="/var/tmp"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def root_server(open_root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An embedded server as root whose jobs run as ``nobody``; its home and storage in
    ``open_root``."""
    home = open_root / "home"
    home.mkdir()
    (home / "server.yaml").write_text(yaml.safe_dump({"storage_root": str(open_root / "st")}))
    monkeypatch.setenv("STARFORGE_HOME", str(home))
    monkeypatch.delenv("STARFORGE_SERVER", raising=False)
    # Named: the default picks ``nobody`` only when it can also run the runner's Python, which
    # lives under root's 0700 home here (these probes run bash and curl).
    monkeypatch.setenv("STARFORGE_JOB_USER", "nobody")
    assert main(["server", "start"]) == 0
    yield home
    main(["server", "stop"])


def probe_lab(new_lab: Callable[..., Lab], name: str, env: dict[str, str]) -> Lab:
    made = new_lab(name)
    for name, script in (("plain", PLAIN), ("probe", PROBE)):
        experiments.new_experiment(made, name, "custom/custom")
        folder = made.root / "experiments" / name
        (folder / "train.sh").write_text(script)
        (folder / "config.yaml").write_text("starforge:\n  observability: platform\n")
    (made.root / "experiments" / "probe" / "probe.env").write_text(
        "".join(f"{k}={v}\n" for k, v in env.items())
    )
    commit_all(made.root, "add experiments")
    return made


def submit(sf: Callable[..., Result], lab: Lab, exp: str) -> str:
    got = sf("submit", exp, "--profile", "h200:1", "--image", IMAGE, "--json", cwd=lab.root)
    assert got.code == 0, got.err
    body = got.json()
    assert isinstance(body, dict)
    return str(body["run_id"])


def probes(log: str) -> dict[str, str]:
    found = {}
    for line in log.splitlines():
        if line.startswith("probe: "):
            key, _, value = line.removeprefix("probe: ").partition("=")
            found[key] = value
    return found


def test_the_servers_folder_and_settings_are_readable_by_the_server_only(
    settings: Settings,
) -> None:
    settings.home.mkdir(parents=True, exist_ok=True)
    (settings.home / "server.yaml").write_text("hf_offline: true\n")
    (settings.home / "server.yaml").chmod(0o644)
    with client_for(settings):
        pass
    assert stat.S_IMODE(settings.server_dir.stat().st_mode) == 0o700  # db, tokens, logs
    assert stat.S_IMODE((settings.home / "server.yaml").stat().st_mode) == 0o600
    assert (settings.server_dir / "starforge.db").exists()
    # The home is traversable (the default storage root is under it) but not listable.
    assert stat.S_IMODE(settings.home.stat().st_mode) == 0o711


def test_a_run_the_job_user_cannot_enter_is_refused_naming_the_closed_folder(
    open_root: Path,
) -> None:
    closed = open_root / "home"
    run_dir = closed / "storage" / "runs" / "r-1"
    run_dir.mkdir(parents=True)
    closed.chmod(0o700)
    nobody = jobuser.JobUser(name="nobody", uid=65534, gid=65534)
    with pytest.raises(RunnerError) as caught:
        jobuser.check_reachable(nobody, run_dir)
    assert f"cannot enter {closed}" in caught.value.message
    assert "storage_root" in (caught.value.hint or "")
    closed.chmod(0o711)
    jobuser.check_reachable(nobody, run_dir)  # traversable all the way: no complaint


@pytest.mark.integration
@as_root
def test_a_job_of_a_root_server_runs_as_nobody_and_cannot_reach_the_platform(
    root_server: Path,
    open_root: Path,
    sf: Callable[..., Result],
    new_lab: Callable[..., Lab],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STARFORGE_HOME", str(root_server))  # ``sf`` fixture set its own home
    storage = open_root / "st"
    # A first run: its binding and work dir are what the second one goes after.
    lab = probe_lab(new_lab, "first", {})
    other = submit(sf, lab, "plain")
    assert wait_for(sf, other, {"succeeded", "failed"})["status"] == "succeeded"
    (other_binding,) = storage.glob(f"runs/*/*/*/{other}/state/attempt-1.node-0.binding.json")
    lab = probe_lab(
        new_lab,
        "second",
        {
            "TOKEN_FILE": str(root_server / "server" / "local-token"),
            "SERVER_DB": str(root_server / "server" / "starforge.db"),
            "OTHER_BINDING": str(other_binding),
            "OTHER_WORK": str(other_binding.parent.parent / "work"),
        },
    )
    run_id = submit(sf, lab, "probe")
    view = wait_for(sf, run_id, {"succeeded", "failed"})
    log = sf("job", "logs", run_id, "-n", "0", "--no-follow").out

    assert view["status"] == "succeeded", log
    assert probes(log) == {
        "user": "nobody",
        "own-binding": "no",
        "token-file": "no",
        "other-binding": "no",
        "server-db": "no",
        "state": "no",
        "storage-root": "no",
        "other-work": "no",
        "lifecycle": "403",
        "ingest": "200",
        "out": "ok",
    }, log
    (run_dir,) = storage.glob(f"runs/*/*/*/{run_id}")
    assert not (run_dir / "state" / "probe").exists() and not (storage / "probe").exists()
    assert (run_dir / "out" / "probe.txt").read_text() == "written\n"
    tokens = json.loads((run_dir / "state" / "attempt-1.node-0.binding.json").read_text())
    env = (run_dir / "out" / "env.txt").read_text()
    assert f"STARFORGE_TOKEN={tokens['job_token']}" in env and tokens["run_token"] not in env
    series = sf("job", "metrics", run_id, "--json").json()
    assert isinstance(series, dict)
    assert [s["key"] for s in series["series"]] == ["probe"]  # type: ignore[index,union-attr]
