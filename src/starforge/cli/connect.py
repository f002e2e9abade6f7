"""Finding (and if needed starting) the control plane the CLI talks to.

Which server, is :func:`starforge.client.config.find_server` (shared with the stdlib fast path
of ``sf job logs``): with ``STARFORGE_SERVER`` set, or a server saved by ``sf login``, that server
is used as it is. Otherwise the embedded default: a server process under
``$STARFORGE_HOME/server`` on 127.0.0.1, checked here to answer, and started in the background by
the first command that needs it (a file lock keeps two commands from starting two servers).
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import BinaryIO, Protocol, TypeVar

from pydantic import BaseModel

from starforge.cli.output import out
from starforge.client import config
from starforge.client.http import Client
from starforge.contract.errors import ServerUnreachable, StarForgeError, UntrustedCertificate

START_TIMEOUT_S = 60.0
PROBE_TIMEOUT_S = 3.0  # whether the embedded server answers: it does at once, or is not there


class Started(Protocol):
    """What :func:`start_embedded` needs of the server process it started."""

    def poll(self) -> int | None: ...


def popen_server(argv: list[str], log: BinaryIO) -> Started:
    """The server process, detached: its own session, stdin closed, stdout and stderr to ``log``."""
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


# How the embedded server is started. The test suite puts here a launcher that forks the server
# from a python which has its imports done (tests/forked_servers.py); anything put here must
# start exactly ``argv``, as popen_server does.
launch_server: Callable[[list[str], BinaryIO], Started] = popen_server


def running_embedded() -> tuple[str, int] | None:
    """(url, pid) of a live embedded server that answers, or None."""
    found = config.live_embedded()
    if found is None or not answers(found[0]):
        return None
    return found


def answers(url: str, client: Client | None = None) -> bool:
    """Whether the server at ``url`` answers (asked through ``client`` when given, which then
    keeps its connection for the command's requests); a certificate this client does not trust
    is raised (no wait makes it answer)."""
    try:
        if client is not None:
            return client.health(timeout=PROBE_TIMEOUT_S)
        with Client(url, timeout=PROBE_TIMEOUT_S, ca_file=config.chosen_ca_file()) as probe:
            return probe.health()
    except UntrustedCertificate:
        raise
    except StarForgeError:
        return False


def start_embedded(server_args: list[str] | None = None) -> tuple[str, int]:
    """Start the embedded server (unless one runs) and wait until it answers; ``server_args``
    (``--host``, ``--tls-cert``, …) go to ``python -m starforge.server``."""
    folder = config.embedded_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "start.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = running_embedded()
        if found:
            return found
        (folder / "server.json").unlink(missing_ok=True)
        with (folder / "server.out").open("ab") as log:
            argv = [sys.executable, "-m", "starforge.server", "--home", str(config.home())]
            proc = launch_server(argv + (server_args or []), log)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            found = running_embedded()
            if found:
                return found
            if proc.poll() is not None:
                break
            time.sleep(0.1)
        raise ServerUnreachable(
            "the embedded StarForge server did not start",
            hint=f"see {folder / 'server.log'} and {folder / 'server.out'}",
        )


def stop_embedded(timeout_s: float = 30.0) -> int | None:
    """Stop the embedded server; returns its pid, or None if none was running."""
    info = config.read_server_file()
    pid = int(info.get("pid", 0) or 0) if info else 0
    if not pid or not config.pid_alive(pid):
        return None
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while config.pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if config.pid_alive(pid):
        os.kill(pid, signal.SIGKILL)
    return pid


def connect(*, start: bool = True) -> Client:
    """A client for the configured server, starting the embedded one when needed."""
    server = config.find_server()
    if server is not None:
        client = Client(server.url, token=server.token, ca_file=server.ca_file)
        if not server.embedded or answers(server.url, client):
            return client
        client.close()
    if not start:
        raise ServerUnreachable(
            "no StarForge server is running", hint="start one with `sf server start`"
        )
    url, _ = start_embedded()
    return Client(url, token=config.read_local_token(), ca_file=config.chosen_ca_file())


Answer = TypeVar("Answer", bound=BaseModel)


def request(json_out: bool, call: Callable[[Client], Answer]) -> Answer:
    """What most commands do with the server: ``call`` on a connected client, its answer returned
    and made the command's ``--json`` output (set by ``json_out``)."""
    out.set_json(json_out)
    with connect() as client:
        answer = call(client)
    out.data(answer.model_dump(mode="json"))
    return answer
