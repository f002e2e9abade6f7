"""``sf server start|stop|status``: the embedded control plane on this machine."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit, urlunsplit

import typer

from starforge.cli.output import JsonOpt, out

app = typer.Typer(help="Run the embedded control plane on this machine.", no_args_is_help=True)


def _server_args(
    host: str | None, port: int | None, cert: Path | None, key: Path | None, proxy: bool
) -> list[str]:
    """The server's flags, checked here first so a refusal starts nothing."""
    from starforge.contract import listen
    from starforge.contract.errors import UsageError

    if host is not None:
        listen.check(listen.Listen(host, cert, key, proxy))
    for flag, path in (("--tls-cert", cert), ("--tls-key", key)):
        if path is not None and not path.is_file():
            raise UsageError(f"{flag} {path}: no such file", hint="give the PEM file's path")
    pairs = [("--host", host), ("--port", port), ("--tls-cert", cert), ("--tls-key", key)]
    args = [str(x) for flag, value in pairs if value is not None for x in (flag, value)]
    return args + (["--behind-proxy"] if proxy else [])


def _uptime(started: datetime) -> str:
    if started.tzinfo is None:
        started = started.replace(tzinfo=UTC)
    seconds = int((datetime.now(UTC) - started).total_seconds())
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m{rest % 60:02d}s"


def _describe(url: str) -> dict[str, object]:
    from starforge import __version__
    from starforge.client import config
    from starforge.client.http import Client

    with Client(url, ca_file=config.chosen_ca_file()) as client:
        info = client.info()
    return {
        "running": True,
        "url": url,
        "pid": info.pid,
        "version": info.version,
        "executor": info.executor,
        "job_user": info.job_user or "(the server's user)",
        # How jobs are kept apart, in the server's words (an older server said nothing where
        # it separated them).
        "isolation": info.isolation or f"jobs run as {info.job_user}, apart from the platform",
        "started_at": info.started_at.isoformat(),
        "uptime": _uptime(info.started_at),
        "home": str(config.home()),
        "database": info.database,
        "leader": info.leader,
        "registries": info.registries or "(not reported by this server)",
        "containers": info.containers,
        "min_client": info.min_client or "(not reported by this server)",
        "client": __version__,
    }


DatabaseOpt = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        envvar="STARFORGE_DATABASE_URL",
        help="SQLAlchemy URL of the database, e.g. postgresql+psycopg://user@host/starforge "
        "(default: SQLite under the home).",
        show_envvar=True,
    ),
]


def _hidden(database_url: str) -> str:
    """The URL as the server shows it (``user:***@host``), without importing SQLAlchemy here."""
    parts = urlsplit(database_url)
    if parts.password is None:
        return database_url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


@contextmanager
def _server_env(key: str, value: str | None) -> Iterator[None]:
    """``key=value`` in the environment the server process inherits, for this start only."""
    saved = os.environ.get(key)
    if value:
        os.environ[key] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = saved


@app.command()
def start(
    database_url: DatabaseOpt = None,
    json_out: JsonOpt = False,
    host: Annotated[str | None, typer.Option("--host", help="Address to listen on.")] = None,
    port: Annotated[int | None, typer.Option("--port", help="Port (0: a free one).")] = None,
    tls_cert: Annotated[Path | None, typer.Option("--tls-cert", help="HTTPS certificate.")] = None,
    tls_key: Annotated[Path | None, typer.Option("--tls-key", help="Its key (PEM).")] = None,
    behind_proxy: Annotated[
        bool, typer.Option("--behind-proxy", help="Plain HTTP behind a TLS proxy.")
    ] = False,
) -> None:
    """Start the server in the background (nothing happens if it already runs).

    Off 127.0.0.1 it needs --tls-cert/--tls-key or --behind-proxy (tokens never go in the
    clear). Examples: sf server start ·
    sf server start --host 0.0.0.0 --port 8443 --tls-cert cert.pem --tls-key key.pem ·
    sf server start --database-url postgresql+psycopg://sf@db.lab/starforge
    """
    from starforge.cli import connect

    out.set_json(json_out)
    began = time.monotonic()
    with _server_env("STARFORGE_DATABASE_URL", database_url):
        url, _ = connect.start_embedded(_server_args(host, port, tls_cert, tls_key, behind_proxy))
    state = _describe(url)
    out.data(state)
    if database_url and state["database"] != _hidden(database_url):
        out.warn(
            f"a server was already running on {state['database']}: --database-url is ignored "
            "(`sf server stop` first to switch databases)"
        )
    out.success(f"server running at {url} (pid {state['pid']}, {time.monotonic() - began:.1f}s)")


@app.command()
def stop(json_out: JsonOpt = False) -> None:
    """Stop the embedded server. Running jobs keep running and are picked up on the next start.

    Example: sf server stop
    """
    from starforge.cli import connect

    out.set_json(json_out)
    pid = connect.stop_embedded()
    out.data({"stopped": pid is not None, "pid": pid})
    out.success(f"stopped the server (pid {pid})" if pid else "no server was running")


@app.command()
def status(json_out: JsonOpt = False) -> None:
    """Show the server's URL, pid, version, the oldest client it accepts, and uptime.

    Example: sf server status --json
    """
    from starforge.cli import connect
    from starforge.client import config

    out.set_json(json_out)
    remote = config.remote_from_env()
    found = (remote.url, 0) if remote else connect.running_embedded()
    if found is None:
        out.data({"running": False, "home": str(config.home())})
        out.line("no server running (the first command that needs one starts it)")
        raise typer.Exit(1)
    state = _describe(found[0])
    out.data(state)
    keys = ("url", "pid", "version", "min_client", "client", "executor", "database", "uptime")
    for key in (*keys, "home", "job_user", "isolation", "containers", "registries"):
        out.line(f"{key:>9}: {state[key]}")
    out.line(f"{'loops':>9}: {'leader' if state['leader'] else 'follower (another process leads)'}")
    _warn_versions(str(state["version"]), str(state["min_client"]))


def _warn_versions(server: str, min_client: str) -> None:
    """Say when this client and the server are too far apart (docs/releases.md)."""
    from starforge import __version__
    from starforge.contract import versions
    from starforge.contract.api import MIN_SERVER_VERSION

    if versions.older(server, MIN_SERVER_VERSION):
        out.warn(
            f"the server runs {server}, older than {MIN_SERVER_VERSION}, the oldest this client "
            f"({__version__}) talks to: upgrade the server, or use its client (pip install "
            f"'starforge=={server}')"
        )
    if versions.older(__version__, min_client):
        out.warn(
            f"this client ({__version__}) is older than {min_client}, the oldest the server "
            f"accepts: pip install -U 'starforge>={min_client}'"
        )
