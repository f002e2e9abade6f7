"""Where the client finds its server and its token.

Order: ``STARFORGE_SERVER`` (+ ``STARFORGE_TOKEN``) from the environment; else the embedded
default under ``$STARFORGE_HOME`` (``~/.starforge``): ``server/server.json`` written by a running
embedded server and the local user's token in ``server/local-token`` (mode 0600).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path


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
