"""The warm daemon: a process that has imported what ``sf submit`` runs, and forks one child per
command (the caller's side, and the conversation: :mod:`starforge.cli.warm_client`).

Invariants:

- It never runs a command itself: each child forks from the state the imports left, and runs
  :func:`starforge.cli.main.main` with the caller's argv, so a warm submit is the cold one's
  code, not a copy of it. Before ``main`` the child takes the caller's fds 0, 1, 2, working
  directory, environment and ``sys.argv``, builds new ``sys.std*`` streams and rich consoles on
  them (their terminal, width, NO_COLOR), reseeds ``random``, and gets the signal dispositions
  of a fresh interpreter.
- It never runs old code or a different interpreter: before each fork it compares a fingerprint
  taken at its start (``__version__``, mtime and size of every file of the package, the mtime
  of every ``sys.path`` folder, which a ``pip install`` changes) and the caller's interpreter
  (executable, ``sys.path``, flags) and startup environment (``PYTHON*``, ``LC_*``, ``LANG``,
  and every variable the imports read, recorded while they ran) with its own. Any difference:
  it answers ``S`` and exits; the caller runs cold and starts a fresh daemon.
- Only its own user: a connection whose peer uid (``SO_PEERCRED``) differs is closed unread.
  The socket is 0600 in a 0700 folder, besides.
- One per home (an exclusive lock held for life, taken before the imports); it exits after
  :data:`IDLE_S` without a connection, when its socket file is removed or replaced, and on
  SIGTERM (:func:`starforge.cli.warm_client.stop`). Children are reaped by the kernel
  (SIGCHLD ignored in the daemon, restored in each child) and report to their caller directly,
  so the daemon may end while they run.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import io
import json
import os
import signal
import socket
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import starforge
from starforge.cli import warm_client
from starforge.cli.warm_client import HEADER, REPLY

IDLE_S = 600.0  # no connection for this long: the daemon exits
POLL_S = 5.0  # how often an idle daemon checks its socket file and its idle time
READ_TIMEOUT_S = 10.0  # a caller that connects and sends nothing does not hold the daemon
# What `sf submit` imports before and while it runs (a module missing here is imported by each
# child: slower, never different).
PRELOAD = (
    "starforge.cli.main",
    "starforge.cli.app",
    "starforge.cli.cmd_submit",
    "starforge.cli.cmd_job",  # `sf job ls`
    "starforge.cli.submit_flow",
    "starforge.cli.connect",
    "starforge.cli.logs",
    "starforge.cli.output",
    "starforge.catalog.checks.trl",
    "starforge.catalog.checks.verl",
    "starforge.catalog.checks.nemo_rl",
    "httpx",
    "typer.main",
    "typer.rich_utils",
    "shellingham",
)
STARTUP_ENV_PREFIXES = ("PYTHON", "LC_", "LANG")


class _RecordingEnviron(type(os.environ)):  # type: ignore[misc]
    """``os.environ`` while the daemon imports: notes the name of every variable read."""

    names: ClassVar[set[str]] = set()

    def __getitem__(self, key: str) -> str:
        _RecordingEnviron.names.add(key)
        return str(super().__getitem__(key))


def preload(modules: tuple[str, ...] | None = None) -> set[str]:
    """Import ``modules`` (default :data:`PRELOAD`); the names of the environment variables read
    while doing so."""
    plain = type(os.environ)
    os.environ.__class__ = _RecordingEnviron
    try:
        for name in PRELOAD if modules is None else modules:
            importlib.import_module(name)
    finally:
        os.environ.__class__ = plain
    return set(_RecordingEnviron.names)


def fingerprint() -> list[Any]:
    """What a code change or an install changes: the daemon's code must still be the code."""
    package = Path(starforge.__file__).parent
    files = []
    for root, dirs, names in os.walk(package):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names):
            stat = os.stat(os.path.join(root, name))
            files.append([os.path.join(root, name), stat.st_mtime_ns, stat.st_size])
    folders = [[p, os.stat(p).st_mtime_ns] for p in sys.path if p and os.path.isdir(p)]
    return [starforge.__version__, files, folders]


class Daemon:
    def __init__(self, home: Path, env_names: set[str], lock: Any) -> None:
        self.home, self.lock = home, lock  # the lock: closed in each child, which outlives us
        self.path = warm_client.socket_path(home)
        self.context = warm_client.context()
        self.env = {k: v for k, v in os.environ.items() if self._startup(k) or k in env_names}
        self.env_names = env_names
        self.fingerprint = fingerprint()

    @staticmethod
    def _startup(name: str) -> bool:
        return name.startswith(STARTUP_ENV_PREFIXES)

    def refusal(self, request: dict[str, Any]) -> str | None:
        """Why this daemon must not run the caller's command (it then exits), or None."""
        env: dict[str, str] = request["env"]
        names = self.env_names | {k for k in env if self._startup(k)} | set(self.env)
        if request["context"] != self.context:
            differ = [k for k, v in self.context.items() if request["context"].get(k) != v]
            return f"the caller's interpreter differs ({', '.join(differ)})"
        if differ := sorted(k for k in names if env.get(k) != self.env.get(k)):
            return f"the caller's startup environment differs ({', '.join(differ)})"
        if fingerprint() != self.fingerprint:
            return "the installed code has changed"
        return None

    def loop(self, listener: socket.socket, inode: int) -> None:
        listener.settimeout(POLL_S)
        idle_since = time.monotonic()
        while True:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                if time.monotonic() - idle_since > IDLE_S or not _same_file(self.path, inode):
                    return
                continue
            idle_since = time.monotonic()
            with conn:
                if self.take(conn, listener) == "stale":
                    return

    def take(self, conn: socket.socket, listener: socket.socket) -> str:
        """Read one request and fork its child; "stale" when the daemon must end."""
        uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
        if uid != os.getuid():
            return "refused"  # closed unread
        conn.settimeout(READ_TIMEOUT_S)
        fds: list[int] = []
        try:
            head, fds, _flags, _addr = socket.recv_fds(conn, HEADER.size, 3)
            if len(head) != HEADER.size or len(fds) != 3:
                return "bad"
            request = json.loads(_read(conn, HEADER.unpack(head)[0]))
            if why := self.refusal(request):
                print(f"warm daemon {os.getpid()} exits: {why}", file=sys.stderr, flush=True)
                conn.sendall(REPLY.pack(b"S", 0))
                return "stale"
            conn.settimeout(None)
            if os.fork() == 0:
                _child(conn, [listener, self.lock], fds, request)  # never returns
            return "forked"
        except (OSError, ValueError, KeyError, TypeError):
            return "bad"
        finally:
            for fd in fds:  # the parent keeps no copy: a pipe's reader must see its end
                os.close(fd)


def _same_file(path: Path, inode: int) -> bool:
    try:
        return os.stat(path).st_ino == inode
    except OSError:
        return False


def _read(conn: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = conn.recv(min(size - len(data), 1 << 20))
        if not chunk:
            raise ValueError("the caller closed its request")
        data += chunk
    return bytes(data)


def _child(conn: socket.socket, daemons: list[Any], fds: list[int], request: Any) -> None:
    code, started = 1, False
    try:
        for held in daemons:  # the listener and the lock are the daemon's alone
            held.close()
        _become_caller(fds, request)
        conn.sendall(REPLY.pack(b"P", os.getpid()))
        started = True
        from starforge.cli.main import main

        code = main(list(request["argv"]))
    except SystemExit as exc:  # as a cold `sf` ends: rich's answer to a closed stdout (`| head`)
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except BrokenPipeError:  # its reader closed stdout: nothing more to say, as a cold `sf`
        code = 1
    except BaseException:  # the child must reach os._exit, whatever happened
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        try:
            if started:  # else the caller sees the connection close and runs the command
                conn.sendall(REPLY.pack(b"X", code))
        finally:
            os._exit(code)


def _become_caller(fds: list[int], request: dict[str, Any]) -> None:
    """The process state a cold `sf` of this caller would start with."""
    import random

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.setpgid(0, 0)  # the caller forwards Ctrl-C to this group, as the terminal would
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = list(request["sys_argv"])
    random.seed()  # else every child draws the daemon's sequence
    sys.stdin = sys.__stdin__ = _stream(0, "r", sys.stdin)
    sys.stdout = sys.__stdout__ = _stream(1, "w", sys.stdout)
    sys.stderr = sys.__stderr__ = _stream(2, "w", sys.stderr)
    output = sys.modules.get("starforge.cli.output")
    if output is not None:  # its consoles read the terminal and the environment when made
        output.out.__init__()


def _stream(fd: int, mode: str, like: Any) -> Any:
    """A text stream on ``fd`` as the interpreter makes one at start (the encoding is the
    daemon's: the caller's locale and PYTHONIOENCODING are the daemon's, or it would not serve)."""
    interactive = mode == "w" and (fd == 2 or os.isatty(fd))  # stderr: always line-buffered
    raw = open(fd, mode + "b", closefd=False)  # noqa: SIM115 - the process's, open until it exits
    return io.TextIOWrapper(raw, like.encoding, like.errors, line_buffering=interactive)


def serve(home: str | Path) -> None:
    """Run the daemon of ``home`` until it is idle, stale or stopped (none if one runs)."""
    base = Path(home)
    where = warm_client.folder(base)
    where.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(where, 0o700)
    lock = (where / "daemon.lock").open("a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return  # another daemon serves this home
    (where / "daemon.pid").write_text(str(os.getpid()))  # before the imports: stop() can end us
    names = preload()
    if threading.active_count() != 1:
        print("warm daemon: the imports started a thread; forking is unsafe", file=sys.stderr)
        return
    daemon = Daemon(base, names, lock)
    signal.signal(signal.SIGTERM, lambda _s, _f: sys.exit(0))
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the children
    daemon.path.unlink(missing_ok=True)  # a dead daemon's
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    umask = os.umask(0o177)
    try:
        listener.bind(os.fsencode(daemon.path))
    finally:
        os.umask(umask)
    listener.listen(64)
    inode = os.stat(daemon.path).st_ino
    try:
        daemon.loop(listener, inode)
    finally:
        listener.close()
        if _same_file(daemon.path, inode):
            daemon.path.unlink()
        (where / "daemon.pid").unlink(missing_ok=True)
