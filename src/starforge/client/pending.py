"""Pending submissions: a rerun of an ``sf submit`` that got no answer reuses its idempotency key.

Before ``POST /jobs`` the client writes ``$STARFORGE_HOME/pending/<digest>.json`` holding a fresh
key, where the digest is the sha256 of what is submitted (the spec with its commit, the manifest,
the retry limit), not of where: the embedded server comes back on another port after a crash,
and the server only compares a key with the same user's keys. Once the server has answered, run
made or request refused, the record is removed. A lost response, a Ctrl-C or a crash leaves it
behind, so the same command run again sends the same key and the server returns the run it may
already have made instead of making a second one. A later submission of the same content, after
an answer, gets a new key: submitting twice on purpose still makes two runs. Records older than
``MAX_AGE_S`` are ignored, so a stale one cannot swallow tomorrow's submission.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starforge.client import config
from starforge.contract.atomic import write_json_atomic

MAX_AGE_S = 24 * 3600.0


def folder(base: Path | None = None) -> Path:
    return (base or config.home()) / "pending"


def digest_of(body: dict[str, Any]) -> str:
    """The identity of a submission: its content, not the moment or the URL it was sent to."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class Pending:
    path: Path
    key: str
    reused: bool  # True when an earlier, unanswered submission of the same content left it

    def clear(self) -> None:
        """The server answered: the next submission of this content is a new one."""
        self.path.unlink(missing_ok=True)


def _read_key(path: Path) -> str | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or time.time() - float(data.get("at", 0)) > MAX_AGE_S:
        return None
    key = data.get("key")
    return key if isinstance(key, str) and len(key) >= 8 else None


def open_pending(body: dict[str, Any], base: Path | None = None) -> Pending:
    """The key for this submission: the one an unanswered earlier try used, else a new one."""
    path = folder(base) / f"{digest_of(body)}.json"
    key = _read_key(path)
    if key is not None:
        return Pending(path, key, reused=True)
    key = uuid.uuid4().hex
    # Written before the request leaves: a crash after it keeps the key.
    write_json_atomic(path, {"key": key, "at": time.time()})
    return Pending(path, key, reused=False)
