"""The suite's embedded servers, forked from a preloaded python (tests/forked_servers.py), are
the server ``sf server start`` starts in production: its own session, the caller's environment,
working directory and log, and gone once stopped."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from starforge.cli import connect
from starforge.cli.main import main
from starforge.server.executors.local import pid_alive
from tests import forked_servers

pytestmark = pytest.mark.integration


@pytest.fixture
def launcher(monkeypatch: pytest.MonkeyPatch) -> Iterator[forked_servers.Launcher]:
    made = forked_servers.Launcher()
    monkeypatch.setattr(connect, "launch_server", made)
    yield made
    made.close()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "home"
    monkeypatch.setenv("STARFORGE_HOME", str(home))
    monkeypatch.delenv("STARFORGE_SERVER", raising=False)
    monkeypatch.chdir(tmp_path)
    yield home
    main(["server", "stop"])


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def server_pid(home: Path) -> int:
    return int(json.loads((home / "server" / "server.json").read_text())["pid"])


def environ_of(pid: int) -> dict[str, str]:
    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(p.decode().split("=", 1) for p in pairs if b"=" in p)


def test_a_forked_server_runs_in_its_own_session_with_the_callers_environment(
    launcher: forked_servers.Launcher,
    home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("STARFORGE_FORKED_PROBE", "seen")  # set after the driver's imports
    assert main(["server", "start"]) == 0
    pid = server_pid(home)
    assert launcher._proc is not None and parent_of(pid) == launcher._proc.pid
    assert os.getsid(pid) == pid
    env = environ_of(pid)
    assert env["STARFORGE_FORKED_PROBE"] == "seen" and env["STARFORGE_HOME"] == str(home)
    assert Path(f"/proc/{pid}/cwd").resolve() == tmp_path.resolve()
    assert main(["server", "status"]) == 0
    assert "running" in capsys.readouterr().out

    assert main(["server", "stop"]) == 0
    assert not pid_alive(pid)  # reaped at once: no zombie a status check would take for alive
    assert not Path(f"/proc/{pid}").exists()


def test_an_import_time_difference_starts_the_server_with_popen_and_says_why(
    launcher: forked_servers.Launcher, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    launcher.start()  # its imports run under the current environment
    monkeypatch.setenv("PYTHONWARNINGS", "ignore::DeprecationWarning")  # read at start-up
    with pytest.warns(UserWarning, match=r"environment differs .*PYTHONWARNINGS"):
        assert main(["server", "start"]) == 0
    pid = server_pid(home)
    assert parent_of(pid) == os.getpid()  # Popen's child, not the driver's
