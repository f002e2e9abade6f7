"""Where the client finds its server and its token.

Order: ``STARFORGE_SERVER`` (+ ``STARFORGE_TOKEN``) from the environment; else the server
``sf login`` saved in ``$STARFORGE_HOME/credentials`` (``~/.starforge``; JSON, mode 0600); else the
embedded default under ``$STARFORGE_HOME``: ``server/server.json`` written by a running embedded
server and the local user's token in ``server/local-token`` (mode 0600). ``sf logout`` removes
the credentials file, which brings the embedded default back.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from starforge.contract.atomic import write_json_atomic

CREDENTIALS = "credentials"


def home() -> Path:
    return Path(os.environ.get("STARFORGE_HOME") or Path.home() / ".starforge").expanduser()


@dataclass(frozen=True)
class RemoteConfig:
    url: str
    token: str | None


def remote_from_env() -> RemoteConfig | None:
    url = os.environ.get("STARFORGE_SERVER")
    if not url:
        return None
    return RemoteConfig(url=url, token=os.environ.get("STARFORGE_TOKEN"))


def credentials_path(base: Path | None = None) -> Path:
    return (base or home()) / CREDENTIALS


def read_credentials(base: Path | None = None) -> RemoteConfig | None:
    """The server and token ``sf login`` saved, or None (none saved, or the file is unreadable)."""
    try:
        data = json.loads(credentials_path(base).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not data.get("server"):
        return None
    return RemoteConfig(url=str(data["server"]), token=str(data.get("token") or "") or None)


def save_credentials(url: str, token: str, user: str, base: Path | None = None) -> Path:
    """Keep the server and token for later commands; the file is 0600 from its first byte."""
    path = credentials_path(base)
    write_json_atomic(path, {"server": url, "token": token, "user": user}, mode=0o600)
    return path


def forget_credentials(base: Path | None = None) -> bool:
    """Remove the saved credentials; False when there were none."""
    path = credentials_path(base)
    if not path.exists():
        return False
    path.unlink()
    return True


def configured_remote() -> RemoteConfig | None:
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
