"""The suite's preloaded server python: ``python -m tests.forked_servers_driver``.

It imports what ``python -m starforge.server`` imports (recording the environment variables the
imports read, as the warm client's daemon does), then forgets ``starforge.server.__main__`` so
that each server runs it afresh as ``__main__``. It answers ``{"ready": true, "env_names":
[...]}``, then for each request line ``{"argv", "cwd", "env", "log"}`` forks a child that
becomes ``python -m starforge.server ARGS`` as the embedded server's Popen would start it (its
own session, stdin from /dev/null, stdout and stderr appended to ``log``, exactly ``env``), and
answers ``{"pid"}``. The kernel reaps the children (SIGCHLD ignored here, restored in each
child), so a server that ended is gone at once, as a reaped Popen child is.
"""

import json
import os
import signal
import sys
import threading

from starforge.cli import warm_daemon
from starforge.runner import fresh
from tests import forking

# The server's imports, and the few it makes only once it runs (found with -X importtime).
MODULES = (
    "starforge.server.__main__",
    "starforge.server.db.migration_ops",
    "sqlite3",
    "sqlalchemy.dialects.sqlite.pysqlite",
    "sqlalchemy.dialects.postgresql.psycopg",
    "psycopg",
    "uvicorn.protocols.http.httptools_impl",
    "uvicorn.lifespan.on",
    "anyio.streams.memory",
    "anyio.streams.tls",
    "anyio.streams.stapled",
    "anyio._core._sockets",
)


def _fork(argv: list[str], cwd: str, env: dict[str, str], log: str) -> int:
    def server() -> int:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the server waits on its own children
        os.setsid()
        out = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        fresh.become(stdin=os.devnull, stdout=out, cwd=cwd, env=env)
        return fresh.run_module("starforge.server", argv[3:])

    return forking.fork_program(server)


def main() -> None:
    names = warm_daemon.preload(MODULES)
    del sys.modules["starforge.server.__main__"]
    if threading.active_count() != 1:
        raise SystemExit("the server's imports started a thread: forking would be unsafe")
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    forking.answer({"ready": True, "env_names": sorted(names)})
    for line in sys.stdin:
        request = json.loads(line)
        pid = _fork(list(request["argv"]), request["cwd"], dict(request["env"]), request["log"])
        forking.answer({"pid": pid})


if __name__ == "__main__":
    main()
