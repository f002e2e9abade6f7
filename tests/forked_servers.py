"""Starting the suite's embedded servers forked from a python that has their imports done.

A server started by ``sf server start`` (``connect.start_embedded``) spends about 2 s of CPU
importing FastAPI, SQLAlchemy, pydantic and our routes before its first line, and the suite
starts dozens. :func:`install` puts :class:`Launcher` in ``connect.launch_server``: one driver
per test process (``tests/forked_servers_driver.py``), started at the first server, forks each
server, which then runs ``python -m starforge.server`` afresh as ``__main__`` in its own session
with the caller's environment and working directory, its output appended to the same log.

A server is forked only when its command is this interpreter's ``-m starforge.server`` and its
environment matches the driver's in every variable the imports read and every ``PYTHON*``,
``LC_*`` and ``LANG``; otherwise it starts with Popen as in production, with a warning saying
why. ``STARFORGE_TEST_FORKED_SERVERS=0`` turns the launcher off.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import warnings
from typing import BinaryIO

from starforge.cli import connect, warm_daemon
from starforge.server.executors.local import pid_alive
from tests import forking


class Forked:
    """A server the driver forked: it runs while its pid does (the kernel reaps it)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def poll(self) -> int | None:
        return None if pid_alive(self.pid) else 1  # its code went to the kernel, not to us


class Launcher:
    """The driver process of this test process, started at the first server."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._env: dict[str, str] = {}
        self._names: set[str] = set()

    def __call__(self, argv: list[str], log: BinaryIO) -> connect.Started:
        env = dict(os.environ)
        with self._lock:
            why = self._refusal(argv, env)
            if why:
                warnings.warn(f"server started with Popen: {why}", stacklevel=2)
                return connect.popen_server(argv, log)
            request = {"argv": argv, "cwd": os.getcwd(), "env": env, "log": log.name}
            log.flush()
            answer = self._ask(request)
        return Forked(int(answer["pid"]))

    def _refusal(self, argv: list[str], env: dict[str, str]) -> str:
        if argv[:3] != [sys.executable, "-m", "starforge.server"]:
            return f"{' '.join(argv[:3])} is not this interpreter's -m starforge.server"
        self.start()
        startup = {k for k in env.keys() | self._env.keys() if _startup(k)}
        if differ := sorted(k for k in self._names | startup if env.get(k) != self._env.get(k)):
            return f"its environment differs from the imports' ({', '.join(differ[:5])})"
        return ""

    def start(self) -> None:
        """Start the driver under this process's environment, unless it runs."""
        if self._proc is not None:
            return
        self._env = dict(os.environ)
        self._proc = forking.start_driver("tests.forked_servers_driver", self._env)
        ready = self._read()
        assert ready.get("ready"), ready
        self._names = set(ready["env_names"])

    def _ask(self, request: dict[str, object]) -> dict[str, object]:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(request).encode() + b"\n")
        self._proc.stdin.flush()
        return self._read()

    def _read(self) -> dict[str, object]:
        assert self._proc is not None and self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            raise AssertionError(f"the server driver ended (exit {self._proc.wait()})")
        answer: dict[str, object] = json.loads(line)
        return answer

    def close(self) -> None:
        """End the driver; the servers it forked are their tests' to stop."""
        if self._proc is not None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            self._proc.wait()
            if self._proc.stdout is not None:
                self._proc.stdout.close()
            self._proc = None


def _startup(name: str) -> bool:
    return name.startswith(warm_daemon.STARTUP_ENV_PREFIXES)


def install() -> Launcher | None:
    """Put a :class:`Launcher` in ``connect.launch_server``; None when turned off."""
    if os.environ.get("STARFORGE_TEST_FORKED_SERVERS") == "0":
        return None
    launcher = Launcher()
    connect.launch_server = launcher
    return launcher


def uninstall(launcher: Launcher | None) -> None:
    connect.launch_server = connect.popen_server
    if launcher is not None:
        launcher.close()
