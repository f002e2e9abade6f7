"""The warm daemon runs commands for its own user only.

Its socket is 0600 in a 0700 folder. Behind that, it reads the peer's uid (``SO_PEERCRED``) and
closes a connection from any other user unread: no child, no pid, nothing run. The test loosens
the folder and the socket on purpose, as a careless ``chmod -R`` would, so that ``nobody`` can
reach the socket and the second defence is the one tested; the owner is still served after.
The home lives in a world-traversable temporary folder (pytest's are 0700), removed at the end.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from starforge.cli import warm_client

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="only root can act as another user")

# What another user's process sends: a well-formed request with its fds 0, 1 and 2.
INTRUDER = """
import json, socket, struct, sys
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.connect(sys.argv[1])
body = json.dumps({"argv": ["submit", "--help"], "sys_argv": ["sf"], "cwd": "/"}).encode()
try:
    socket.send_fds(sock, [struct.pack("!Q", len(body))], [0, 1, 2])
    sock.sendall(body)
    print("answered" if sock.recv(5) else "closed")
except OSError:
    print("closed")
"""


def interpreter_for_nobody() -> str | None:
    """A Python that ``nobody`` may run (a virtual environment under /root is not one)."""
    for candidate in (sys.executable, shutil.which("python3", path=os.defpath)):
        if not candidate:
            continue
        try:
            done = subprocess.run(
                [candidate, "-c", "import socket; socket.send_fds"],
                user="nobody",
                capture_output=True,
                check=False,
            )
        except PermissionError:
            continue
        if done.returncode == 0:
            return candidate
    return None


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A home whose daemon is stopped and whose folder is removed at the end."""
    base = Path(tempfile.mkdtemp(prefix="sf-warm-"))
    base.chmod(0o755)
    monkeypatch.setenv("STARFORGE_HOME", str(base))
    monkeypatch.setenv("STARFORGE_WARM_CLIENT", "1")
    try:
        yield base
    finally:
        warm_client.stop(base)
        shutil.rmtree(base)


def test_a_connection_from_another_user_is_closed_unread(
    home: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    python = interpreter_for_nobody()
    if python is None:
        pytest.skip("no Python interpreter that `nobody` may run")
    # Started by this process, as `sf` starts it: this process is one it serves.
    warm_client.start_daemon(home)
    deadline = time.monotonic() + 60
    while not warm_client.answers(home):
        assert time.monotonic() < deadline, "the warm daemon did not answer within 60 s"
        time.sleep(0.05)
    folder, sock = warm_client.folder(home), warm_client.socket_path(home)
    assert (folder.stat().st_mode & 0o777, sock.stat().st_mode & 0o777) == (0o700, 0o600)
    folder.chmod(0o755)  # the first defence taken away: `nobody` can reach the socket
    sock.chmod(0o666)
    done = subprocess.run(
        [python, "-c", INTRUDER, str(sock)],
        user="nobody",
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "closed"), done.stderr
    # The daemon is still there, and runs its owner's command.
    capfd.readouterr()
    code = warm_client.run(["submit", "--help"])
    assert code == 0, (folder / "daemon.log").read_text()
    assert "Usage: sf submit" in capfd.readouterr().out
