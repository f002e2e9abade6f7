"""``python -m starforge.server [--home DIR]``: run the control plane in the foreground.

The server binds its socket itself (port 0 picks a free one: the previous start's, kept in
``<home>/server/last_port``, when it is free), so it knows its URL before serving;
once uvicorn has started, it writes ``<home>/server/server.json`` = {url, pid, version,
started_at} atomically, and removes it on a clean shutdown (SIGTERM or SIGINT). A second server
for the same home refuses to start while the first one's pid is alive. Logs go to
``<home>/server/server.log``. The database (``--database-url``, else the settings') is migrated
before the socket is bound; one migrated by a newer StarForge is refused (exit status 1).
Several servers (each with its own home) may share one PostgreSQL database and storage root:
all serve the API, one leads the loops (``loops/leader``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import uvicorn
import uvloop

from starforge import __version__
from starforge.contract import listen
from starforge.contract.atomic import write_json_atomic
from starforge.contract.errors import UsageError
from starforge.server.app import create_app
from starforge.server.db.engine import SchemaNewerThanCode, make_engine, migrate
from starforge.server.db.models import utcnow
from starforge.server.executors.local import pid_alive
from starforge.server.settings import Settings, load_settings

log = logging.getLogger("starforge.server")
SHUTDOWN_GRACE_S = 5


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m starforge.server", description="Run the StarForge control plane."
    )
    parser.add_argument("--home", help="state directory (default $STARFORGE_HOME or ~/.starforge)")
    parser.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port to listen on (0 = a free one)")
    parser.add_argument("--tls-cert", type=Path, help="serve HTTPS with this certificate (PEM)")
    parser.add_argument("--tls-key", type=Path, help="the certificate's private key (PEM)")
    parser.add_argument(
        "--behind-proxy", action="store_true", help="plain HTTP behind a TLS-terminating proxy"
    )
    parser.add_argument(
        "--database-url",
        help="SQLAlchemy database URL (default $STARFORGE_DATABASE_URL, else SQLite in the home)",
    )
    return parser.parse_args(argv)


def setup_logging(settings: Settings) -> None:
    settings.server_dir.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(settings.server_dir / "server.log", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


def other_server(info_path: Path) -> str | None:
    """The URL of a live server already registered for this home, if any."""
    try:
        info = json.loads(info_path.read_text(encoding="utf-8"))
        pid = int(info["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if pid != os.getpid() and pid_alive(pid):
        return str(info.get("url", "?"))
    return None


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP, and
    # without it every response whose headers and body go out in two writes waits ~40 ms for
    # the client's delayed ACK (Nagle).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(2048)
    sock.set_inheritable(False)
    return sock


def bind_as_before(host: str, port: int, last_port: Path) -> socket.socket:
    """``bind``; with port 0 the port of the previous start first, when it is free, so URLs
    printed before a restart (console links, ``sf server status``) still lead here."""
    if port == 0:
        try:
            previous = int(last_port.read_text().strip())
        except (OSError, ValueError):
            previous = 0
        if 0 < previous < 65536:
            try:
                return bind(host, previous)
            except OSError:  # taken meanwhile: any free port, as on a first start
                pass
    sock = bind(host, port)
    with contextlib.suppress(OSError):
        last_port.write_text(f"{sock.getsockname()[1]}\n")
    return sock


def url_of(sock: socket.socket, scheme: str = "http") -> str:
    host, port = sock.getsockname()[:2]
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


class Server(uvicorn.Server):
    """uvicorn's server, except that a signal ends ``serve`` normally.

    uvicorn re-raises SIGTERM/SIGINT once it has shut down, which would kill the process before
    server.json is removed; here the signal only asks for a graceful exit.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.handle_exit, sig, None)
        try:
            yield
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)


async def serve(
    server: uvicorn.Server, sock: socket.socket, info_path: Path, info: dict[str, object]
) -> None:
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():
        await asyncio.sleep(0.05)
    if server.started:
        write_json_atomic(info_path, info)
        log.info("serving at %s", info["url"])
    try:
        await task
    finally:
        with contextlib.suppress(OSError, ValueError, KeyError):
            if json.loads(info_path.read_text())["pid"] == os.getpid():
                info_path.unlink()


def prepare_database(settings: Settings) -> None:
    """Migrate the database (or refuse it) before serving anything."""
    engine = make_engine(settings.db_url)
    try:
        migrate(engine)
    finally:
        engine.dispose()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    given = (("host", args.host), ("port", args.port), ("database_url", args.database_url))
    overrides = {k: v for k, v in given if v is not None}
    settings = load_settings(args.home, **overrides)
    exposure = listen.Listen(settings.host, args.tls_cert, args.tls_key, args.behind_proxy)
    try:
        listen.check(exposure)
    except UsageError as err:
        print(f"error: {err.message}\nhint: {err.hint}", file=sys.stderr)
        return 2
    setup_logging(settings)
    info_path = settings.server_dir / "server.json"
    running = other_server(info_path)
    if running is not None:
        print(f"a StarForge server already runs for {settings.home} at {running}", file=sys.stderr)
        return 1
    try:  # before binding: a database this code must not serve is refused with one clear line
        prepare_database(settings)
    except SchemaNewerThanCode as exc:
        log.error("%s", exc)
        print(f"starforge server: {exc}", file=sys.stderr)
        return 1
    sock = bind_as_before(settings.host, settings.port, settings.server_dir / "last_port")
    url = settings.url or url_of(sock, exposure.scheme)
    settings = settings.model_copy(update={"url": url})
    app = create_app(settings)
    # What start-up made (modules, models, routes: ~150,000 objects) lives as long as the
    # process. Frozen, it is out of every full collection, which otherwise walks all of it
    # (~0.1 s of CPU here; a scheduler pass over a long queue sets one off every few passes).
    gc.freeze()
    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        http="httptools",
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
        ssl_certfile=exposure.tls_cert,
        ssl_keyfile=exposure.tls_key,
    )
    info = {
        "url": url,
        "pid": os.getpid(),
        "version": __version__,
        "started_at": utcnow().isoformat(),
    }
    # uvloop's event loop and httptools' parser (above) instead of asyncio's and h11's pure
    # Python: about a tenth less server CPU per admission (bench/admissions.py).
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(serve(Server(config), sock, info_path, info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
