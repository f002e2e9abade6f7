"""docs/deploy.md as a procedure that works: a lab's server started from the guide's own
``docs/examples/server.yaml`` and service unit, the documented first-admin command, a signed-in
admin's job, then the documented backup and restore blocks, run as written.

The guide's blocks are the ones marked ``<!-- deploy-test: NAME -->``; the test replaces only the
lab's names (host, port, paths, database, the day of the backup, ``sudo`` for a root test) and
runs them with bash. The server runs as root with the example's defaults (no ``job_user``,
``isolation: auto``), so each run takes a uid of its own: its storage lives under /var/tmp,
where every uid may enter, as a lab's /srv would be. PostgreSQL is the suite's throwaway cluster
(``scripts/postgres.sh``), with a database of the test's own.
"""

from __future__ import annotations

import datetime
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from sqlalchemy.engine.url import make_url

from starforge.project.lab import Lab
from tests.conftest import Result
from tests.integration.conftest import stop_every_run, wait_for
from tests.postgres.databases import Databases, require_cluster
from tests.tls_certs import make_lab_ca

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "deploy.md"
EXAMPLE = ROOT / "docs" / "examples" / "server.yaml"
IMAGE = "registry.example/train:v1"
UID_RANGE = (61184, 64511)  # the example's job_uid_range

pytestmark = [
    pytest.mark.integration,
    # Its database is PostgreSQL on both passes of the suite: run once.
    pytest.mark.client,
    pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed"),
    pytest.mark.skipif(
        os.geteuid() != 0, reason="the guide's server is root (a uid of its own per run)"
    ),
]


def guide_blocks() -> dict[str, str]:
    """The guide's tested blocks by name: the fenced block after ``<!-- deploy-test: NAME -->``."""
    found = re.findall(r"<!-- deploy-test: ([\w-]+) -->\n```\w*\n(.*?)```", GUIDE.read_text(), re.S)
    return dict(found)


@dataclass(frozen=True)
class Lab_:
    """Where this test's lab lives, in place of the guide's names."""

    home: Path  # /var/lib/starforge
    srv: Path  # /srv/starforge
    tls: Path  # /etc/starforge/tls
    backups: Path  # /var/backups/starforge
    port: int
    database_url: str

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def adapt(self, text: str) -> str:
        db = make_url(self.database_url)
        pg = f"PGHOST={db.host} PGPORT={db.port} PGUSER={db.username} PGDATABASE={db.database}"
        for guide, here in (
            ("https://forge.lab.example:8443", self.url),
            ("postgresql+psycopg://starforge@db.lab.example:5432/starforge", self.database_url),
            ("PGHOST=db.lab.example PGPORT=5432 PGUSER=starforge PGDATABASE=starforge", pg),
            ("/var/lib/starforge", str(self.home)),
            ("/srv/starforge", str(self.srv)),
            ("/etc/starforge/tls", str(self.tls)),
            ("/var/backups/starforge", str(self.backups)),
            ("/opt/starforge/venv", sys.prefix),
            ("host: 0.0.0.0", "host: 127.0.0.1"),
            ("port: 8443", f"port: {self.port}"),
            ("DAY=2026-12-01", f"DAY={datetime.date.today().isoformat()}"),
            ("sudo ", ""),
        ):
            text = text.replace(guide, here)
        # Every name of the guide's lab was replaced: nothing here reaches for another host.
        assert "lab.example" not in text and "8443" not in text, text
        return text


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def plain_env(**extra: str) -> dict[str, str]:
    """This environment without the suite's StarForge settings (the guide's server has its own)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STARFORGE_", "FORGE_"))}
    return {**env, **extra}


def bash(script: str, timeout: float = 300, **env: str) -> str:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        env=plain_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"{script}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    return done.stdout


@contextmanager
def unit(place: Lab_) -> Iterator[None]:
    """The server as the guide's systemd unit starts it (its Environment= and ExecStart=); at the
    end its runs are stopped and it gets SIGTERM, as ``systemctl stop`` sends it."""
    text = place.adapt(guide_blocks()["unit"]).replace("\\\n", " ")
    env = dict(re.findall(r"^Environment=(\w+)=(.*)$", text, re.M))
    command = re.search(r"^ExecStart=(.*)$", text, re.M)
    assert command is not None
    info = place.home / "server" / "server.json"
    info.unlink(missing_ok=True)
    log = (place.home / "unit.out").open("ab")
    proc = subprocess.Popen(
        ["bash", "-c", f"exec {command.group(1)}"],
        env=plain_env(**env),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while not info.exists() and proc.poll() is None:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        assert proc.poll() is None, (place.home / "unit.out").read_text()
        yield
        stop_every_run()  # runners outlive their server by design: none may outlive the test
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        log.close()


@pytest.fixture
def sf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Ada's own ``sf`` home, not the module's embedded server."""
    home = tmp_path / "ada"
    monkeypatch.setenv("STARFORGE_HOME", str(home))
    for name in ("STARFORGE_SERVER", "STARFORGE_TOKEN", "STARFORGE_CA_FILE"):
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture
def place(tmp_path: Path) -> Iterator[Lab_]:
    databases = Databases(require_cluster())
    open_root = Path(tempfile.mkdtemp(prefix="sf-deploy-guide-", dir="/var/tmp"))
    open_root.chmod(0o755)  # as /srv: every run's uid may enter
    try:
        made = Lab_(
            home=open_root / "var-lib-starforge",
            srv=open_root / "srv",
            tls=tmp_path / "tls",
            backups=tmp_path / "backups",
            port=free_port(),
            database_url=databases.empty(),  # what the server sees on its first start
        )
        make_lab_ca(made.tls)
        yield made
    finally:
        databases.close()
        shutil.rmtree(open_root, ignore_errors=True)


def submit(sf: Callable[..., Result], lab: Lab) -> str:
    got = sf("submit", "c1", "--profile", "h200:1", "--image", IMAGE, "--json", cwd=lab.root)
    assert got.code == 0, got.err
    body = got.json()
    assert isinstance(body, dict)
    return str(body["run_id"])


def test_the_deploy_guide_sets_up_a_lab_server_that_runs_jobs_and_restores_from_a_backup(
    sf: Callable[..., Result],
    custom_lab: Callable[..., Lab],
    place: Lab_,
    tmp_path: Path,
) -> None:
    place.home.mkdir(mode=0o711)
    (place.home / "server.yaml").write_text(place.adapt(EXAMPLE.read_text()))
    (place.home / "server.yaml").chmod(0o600)
    example = yaml.safe_load((place.home / "server.yaml").read_text())
    Path(example["storage_root"]).mkdir(parents=True, mode=0o755)
    blocks = guide_blocks()
    assert {"unit", "first-admin", "backup", "restore"} <= set(blocks)
    lab = custom_lab(steps=2)
    client_home = str(tmp_path / "root-client")

    with unit(place):
        # The documented first-admin command, as root on the server host: ada's token, once.
        said = bash(place.adapt(blocks["first-admin"]), STARFORGE_HOME=client_home)
        token = said.strip().splitlines()[-1]
        assert token.startswith("sf_"), said
        login = sf("--ca-file", str(place.tls / "ca.pem"), "login", "--server", place.url,
                   "--token", token)  # fmt: skip
        assert login.code == 0, login.err
        me = sf("whoami", "--json").json()
        assert isinstance(me, dict) and (me["user"], me["role"]) == ("ada", "admin")

        kept = submit(sf, lab)
        view = wait_for(sf, kept, {"succeeded", "failed"})
        assert view["status"] == "succeeded", view
        log = sf("job", "logs", kept, "-n", "0", "--no-follow").out
        found = re.search(r"the job runs as \S+ \(uid (\d+),", log)
        assert found is not None, log  # a uid of its own: the example's root server isolates
        assert UID_RANGE[0] <= int(found.group(1)) <= UID_RANGE[1]

    # The documented backup, with every server process stopped (drained: nothing ran).
    bash(place.adapt(blocks["backup"]))
    day = datetime.date.today().isoformat()
    assert (place.backups / f"db-{day}.dump").stat().st_size > 0
    assert (place.backups / f"storage-{day}.tar.gz").stat().st_size > 0

    with unit(place):
        lost = submit(sf, lab)  # after the backup: the restore forgets it
        assert wait_for(sf, lost, {"succeeded", "failed"})["status"] == "succeeded"

    bash(place.adapt(blocks["restore"]))

    with unit(place):
        runs = sf("job", "ls", "--json").json()
        assert isinstance(runs, list)
        states = {r["run_id"]: r["status"] for r in runs}
        assert states == {kept: "succeeded"}, states
        log = sf("job", "logs", kept, "-n", "0", "--no-follow")
        assert log.code == 0 and "step 2/2" in log.out, log.err  # its folder came back too
        assert sf("job", "status", lost).code != 0


def python_outside_root() -> str | None:
    """A Python 3.11+ that every user may run, as the guide asks for (not under /root, as the
    suite's own interpreter may be): the guide's ``python3``."""
    for candidate in ("/usr/local/bin/python3", "/usr/bin/python3"):
        if not os.access(candidate, os.X_OK) or Path(candidate).resolve().is_relative_to("/root"):
            continue
        check = "import sys; sys.exit(sys.version_info < (3, 11))"
        if subprocess.run([candidate, "-c", check], check=False).returncode == 0:
            return candidate
    return None


BUILT = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")


@pytest.mark.training  # the suite's mark for its slow tests: a venv's install takes minutes
def test_the_deploy_guides_venv_installs_starforge_that_every_job_user_can_import() -> None:
    python = python_outside_root()
    if python is None:
        pytest.skip("no Python 3.11+ outside /root to make the guide's venv from")
    opt = Path(tempfile.mkdtemp(prefix="sf-deploy-venv-", dir="/var/tmp"))
    opt.chmod(0o755)  # as /: nobody may enter it
    try:
        # What the package is built from, copied: pip builds in the source tree (build/,
        # *.egg-info), which must not touch this checkout's own.
        source = opt / "source"
        shutil.copytree(ROOT / "src", source / "src", ignore=BUILT)
        for name in ("pyproject.toml", "README.md"):
            shutil.copy(ROOT / name, source / name)
        block = guide_blocks()["venv"]
        for guide, here in (
            ("/opt/starforge", str(opt / "opt-starforge")),
            ("python3 -m venv", f"{python} -m venv"),
            # Offline: this checkout in place of the release on PyPI, its dependencies from the
            # machine's own package folders (pip's configuration), as scripts/setup.sh installs.
            # Without [train]: with torch and TRL the install took 14.5 min on a loaded test
            # machine, past the suite's 10 min a test; the rest is the same pip install.
            ("'starforge[train]'", f"'{source}'"),
            ("sudo -u nobody ", "runuser -u nobody -- "),  # no sudo on a root test machine
            ("sudo ", ""),
        ):
            assert guide in block, guide
            block = block.replace(guide, here)
        # From /: the guide's nobody can enter it, unlike this test's working directory.
        bash(f"cd /\n{block}", timeout=540)
        # A package folder's own installation, not this checkout's sources on a path.
        venv_python = opt / "opt-starforge" / "venv" / "bin" / "python"
        where = "import starforge.report as r; print(r.__file__)"
        found = subprocess.run(
            ["runuser", "-u", "nobody", "--", str(venv_python), "-c", where],
            cwd="/",
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert found.startswith(str(opt / "opt-starforge" / "venv")), found
    finally:
        shutil.rmtree(opt, ignore_errors=True)
