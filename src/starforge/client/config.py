"""Where the client finds its server and its token.

Order: ``STARFORGE_SERVER`` (+ ``STARFORGE_TOKEN``) from the environment; else the server
``sf login`` saved in ``$STARFORGE_HOME/credentials`` (``~/.starforge``; JSON, mode 0600); else the
embedded default under ``$STARFORGE_HOME``: ``server/server.json`` written by a running embedded
server and the local user's token in ``server/local-token`` (mode 0600). ``sf logout`` removes
the credentials file, which brings the embedded default back.

The CA an https server's certificate is checked against (:mod:`starforge.client.trust`):
``sf --ca-file`` (:func:`use_ca_file`), else ``STARFORGE_CA_FILE``, else the one ``sf login``
saved with its server; none: the default bundle.

:func:`find_server` is that order, in one place: ``sf``'s normal path
(:func:`starforge.cli.connect.connect`) and its stdlib fast path (:mod:`starforge.cli.fastpath`)
both call it. So this module imports the standard library only (the atomic writer is imported
where a file is written): the fast path must not pay for anything else.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

CREDENTIALS = "credentials"
CA_ENV = "STARFORGE_CA_FILE"  # the same name as trust.CA_ENV (not imported: fast path)
_ca_option: str | None = None  # ``sf --ca-file``, set for each command by the root callback


def use_ca_file(path: str | None) -> None:
    """The CA file ``sf --ca-file`` gave this command (None: not given)."""
    global _ca_option
    _ca_option = path


def chosen_ca_file(saved: str | None = None) -> str | None:
    """The CA file to trust: ``--ca-file``, else ``STARFORGE_CA_FILE``, else ``saved``."""
    chosen = _ca_option or os.environ.get(CA_ENV) or saved
    return os.path.abspath(os.path.expanduser(chosen)) if chosen else None


def home() -> Path:
    return Path(os.environ.get("STARFORGE_HOME") or Path.home() / ".starforge").expanduser()


class Server:
    """The server a command talks to, and the token it sends. A plain class, not a dataclass:
    ``dataclasses`` imports ``inspect``, a tenth of the fast path's import time."""

    __slots__ = ("ca_file", "embedded", "token", "url")

    def __init__(
        self, url: str, token: str | None, *, embedded: bool = False, ca_file: str | None = None
    ) -> None:
        self.url, self.token = url, token
        self.embedded = embedded  # the local embedded server (its process may not answer yet)
        self.ca_file = ca_file if ca_file is not None else chosen_ca_file()

    def __repr__(self) -> str:
        token = "set" if self.token else "none"  # never print a token
        return (
            f"Server(url={self.url!r}, token={token}, embedded={self.embedded}, "
            f"ca_file={self.ca_file!r})"
        )


def remote_from_env() -> Server | None:
    url = os.environ.get("STARFORGE_SERVER")
    if not url:
        return None
    return Server(url=url, token=os.environ.get("STARFORGE_TOKEN"))


def credentials_path(base: Path | None = None) -> Path:
    return (base or home()) / CREDENTIALS


def read_credentials(base: Path | None = None) -> Server | None:
    """The server and token ``sf login`` saved, or None (none saved, or the file is unreadable)."""
    try:
        data = json.loads(credentials_path(base).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not data.get("server"):
        return None
    saved_ca = str(data.get("ca_file") or "") or None
    return Server(
        url=str(data["server"]),
        token=str(data.get("token") or "") or None,
        ca_file=chosen_ca_file(saved_ca),
    )


def save_credentials(
    url: str, token: str, user: str, base: Path | None = None, ca: str | None = None
) -> Path:
    """Keep the server, token (and the CA to trust it by) for later commands; the file is 0600
    from its first byte."""
    from starforge.contract.atomic import write_json_atomic  # tempfile: only when writing

    path = credentials_path(base)
    saved: dict[str, str] = {"server": url, "token": token, "user": user}
    if ca:
        saved["ca_file"] = ca
    write_json_atomic(path, saved, mode=0o600)
    return path


def forget_credentials(base: Path | None = None) -> bool:
    """Remove the saved credentials; False when there were none."""
    path = credentials_path(base)
    if not path.exists():
        return False
    path.unlink()
    return True


def configured_remote() -> Server | None:
    """The server to use instead of the embedded one: the environment's, else the saved one."""
    return remote_from_env() or read_credentials()


def embedded_dir(base: Path | None = None) -> Path:
    return (base or home()) / "server"


def read_server_file(base: Path | None = None) -> dict[str, object] | None:
    path = embedded_dir(base) / "server.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_local_token(base: Path | None = None) -> str | None:
    try:
        return (embedded_dir(base) / "local-token").read_text().strip() or None
    except OSError:
        return None


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return True


def live_embedded(base: Path | None = None) -> tuple[str, int] | None:
    """(url, pid) from ``server.json`` when its process is alive; whether it answers is not
    checked here (that needs HTTP: :func:`starforge.cli.connect.running_embedded`)."""
    info = read_server_file(base)
    if not info:
        return None
    url, pid = str(info.get("url", "")), int(info.get("pid", 0) or 0)
    if not url or not pid or not pid_alive(pid):
        return None
    return url, pid


def find_server() -> Server | None:
    """The server to use, in the order the module's docstring gives: the configured remote, else
    the embedded server ``server.json`` names (with the local token), else None: no server is
    running, and the caller starts one (or says so)."""
    remote = configured_remote()
    if remote is not None:
        return remote
    found = live_embedded()
    if found is None:
        return None
    return Server(found[0], read_local_token(), embedded=True)
