"""The caller's side of the warm client: ``sf submit`` (and ``sf job ls``) handed to a process
that has imported it.

A cold ``sf submit`` spends most of its second importing typer, pydantic, httpx, rich and our
models; ``sf job ls`` four fifths of its time (after a page read in milliseconds). So, as the
Gradle daemon does, a per-user background process (:mod:`starforge.cli.warm_daemon`) keeps those
imports done and forks one child per command; the child runs :func:`starforge.cli.main.main` with
the caller's argv, working directory, environment and terminal (fds 0, 1 and 2 passed over the
socket), so what it prints and returns is what the cold command would. This module is what the
``sf`` process runs first, so it imports the standard library only (never typer, pydantic, httpx or
rich).

The conversation, on ``$STARFORGE_HOME/warm/submit.sock`` (mode 0600, folder 0700):

- caller → daemon: an 8-byte length with fds 0, 1, 2 attached (``SCM_RIGHTS``), then that many
  bytes of JSON: argv, cwd, the whole environment and the interpreter's context (executable,
  ``sys.path``, flags);
- daemon → caller: ``S`` when it cannot serve this caller (its code is stale, or the caller's
  interpreter or startup environment differs from its own; it then exits), else the child's
  ``P`` + pid, then ``X`` + exit code when the command has ended.

Nothing reached the daemon (no socket, a stale one, an ``S``): :func:`run` answers None, the
caller runs the command in-process (cold), and a fresh daemon is started in the background so that
the next submit is warm. Ctrl-C reaches the caller's process group only, so the caller forwards
SIGINT, SIGTERM and SIGHUP to the child's process group. ``STARFORGE_WARM_CLIENT=0`` turns all
of this off.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import struct
import sys
import time
from pathlib import Path

from starforge.client import config

TYPE_CHECKING = False  # typing's own import costs what this path saves
if TYPE_CHECKING:
    from typing import IO

SWITCH = "STARFORGE_WARM_CLIENT"  # "0" (or false/no/off): every command runs in its own process
# The commands the daemon serves (argv prefixes): a submit, and the read users repeat most.
COMMANDS = (("submit",), ("job", "ls"))
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
HEADER = struct.Struct("!Q")  # the request's length
REPLY = struct.Struct("!ci")  # (kind, value): b"P" pid, b"X" exit code, b"S" stale
SOCKET_PATH_MAX = 107  # sun_path's size, less its terminating NUL


def enabled() -> bool:
    return os.environ.get(SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


def folder(home: Path | None = None) -> Path:
    return (home or config.home()) / "warm"


def socket_path(home: Path | None = None) -> Path:
    return folder(home) / "submit.sock"


def context() -> dict[str, object]:
    """What the interpreter fixed at its start: a daemon serves only callers with the same."""
    return {
        "executable": sys.executable,
        "path": list(sys.path),
        "flags": list(sys.flags),
        "xoptions": {str(k): str(v) for k, v in sys._xoptions.items()},
        "warnoptions": list(sys.warnoptions),
    }


def run(args: list[str]) -> int | None:
    """The exit code of ``sf ARGS`` run by the warm daemon, or None when the caller must run it
    itself (a daemon is then started for the next command)."""
    if not any(args[: len(c)] == list(c) for c in COMMANDS) or not enabled():
        return None
    path = socket_path()
    if len(os.fsencode(path)) > SOCKET_PATH_MAX:
        return None  # the home's path is too long for a unix socket: always cold
    pending: list[int] = []
    saved = {sig: signal.signal(sig, lambda s, _f: pending.append(s)) for sig in FORWARDED}
    try:
        code = _converse(path, args, pending)
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    if code is None and pending:  # interrupted before the daemon took the command
        sys.stderr.write("interrupted\n")
        return 130
    if code is None:
        start_daemon()
    elif code < 0:  # the child died of the signal we forwarded: so does the caller, as cold
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code
    return code


def _converse(path: Path, args: list[str], pending: list[int]) -> int | None:
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError:
        return None
    with sock:
        try:
            sock.connect(os.fsencode(path))
            request = {"argv": args, "sys_argv": sys.argv, "cwd": os.getcwd()}
            request |= {"env": dict(os.environ), "context": context()}
            body = json.dumps(request).encode()
            socket.send_fds(sock, [HEADER.pack(len(body))], [0, 1, 2])
            sock.sendall(body)
            kind, pid = _reply(sock)
        except (OSError, EOFError):
            return None  # nothing ran: the caller runs the command itself
        if kind != b"P":
            return None
        return _wait(sock, pid, pending)


def _wait(sock: socket.socket, pid: int, pending: list[int]) -> int:
    """Forward signals to the child's process group until it reports its exit code."""

    def forward(sig: int, _frame: object) -> None:
        pending.append(sig)
        with contextlib.suppress(OSError):  # it has ended already
            os.killpg(pid, sig)

    for sig in FORWARDED:
        signal.signal(sig, forward)
    for sig in list(pending):  # arrived before the pid did
        forward(sig, None)
    try:
        kind, code = _reply(sock)
        if kind == b"X":
            return code
    except (OSError, EOFError):
        pass
    if pending:  # the child died of a signal it was sent: the caller dies of it too
        return -pending[-1]
    sys.stderr.write("error: the warm `sf` process ended without an exit code\n")
    sys.stderr.write(f"hint: rerun with {SWITCH}=0 to run the command in this process\n")
    return 1


def _reply(sock: socket.socket) -> tuple[bytes, int]:
    data = b""
    while len(data) < REPLY.size:
        chunk = sock.recv(REPLY.size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    kind, value = REPLY.unpack(data)
    return kind, value


def start_daemon(home: Path | None = None) -> None:
    """Start the daemon detached (its own session, stdio to its log); at most one per home runs,
    so a second one started meanwhile exits at once."""
    import subprocess  # only here: a warm submit never needs it

    base = home or config.home()
    try:
        folder(base).mkdir(mode=0o700, parents=True, exist_ok=True)
        with (folder(base) / "daemon.log").open("ab") as log:
            subprocess.Popen(
                [
                    sys.executable,
                    *subprocess._args_from_interpreter_flags(),  # the caller's -B, -X, -W…
                    "-c",
                    "import sys, json; sys.path[:] = json.loads(sys.argv[2]); "
                    "from starforge.cli import warm_daemon; warm_daemon.serve(sys.argv[1])",
                    str(base),
                    json.dumps(sys.path),
                ],
                env=dict(os.environ),  # as the caller's command sees it (and sends it)
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
    except OSError:
        pass  # no daemon: every submit runs cold, as before


def answers(home: Path | None = None) -> bool:
    """Whether a daemon listens on the home's socket (tests and benchmarks wait on it)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(os.fsencode(socket_path(home)))
        except OSError:
            return False
    return True  # the daemon reads no request from this connection, and goes on


def stop(home: Path | None = None, timeout_s: float = 30.0) -> bool:
    """End the home's daemon (tests, benchmarks); True when one was running. Commands it is
    running go on: each child reports to its own caller."""
    if not folder(home).is_dir():
        return False
    # The daemon holds its lock for its whole life: taking the lock is the sign it has ended.
    with (folder(home) / "daemon.lock").open("a") as lock:
        if _take(lock):
            return False  # none runs (a pid file left by one that was killed is not believed)
        # OSError: it has just ended, or not yet written its pid; the lock tells.
        with contextlib.suppress(OSError, ValueError):
            os.kill(int((folder(home) / "daemon.pid").read_text()), signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while not _take(lock):
            if time.monotonic() > deadline:
                raise TimeoutError("the warm daemon did not end")
            time.sleep(0.01)
    return True


def _take(lock: IO[str]) -> bool:
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
