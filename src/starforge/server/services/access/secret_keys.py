"""The key ring that seals secrets at rest: AES-256-GCM (``cryptography``), keys off the database.

Where the keys live, first found wins:

- ``STARFORGE_SECRETS_KEY`` in the server's environment: one or more base64 keys separated by
  commas, the first the current one (an operator rotates by putting a new key first, restarting,
  running ``sf admin secrets rotate-key``, then dropping the old one);
- else ``<server_dir>/secrets.key``, a 0600 JSON file created on first use, which ``rotate-key``
  rewrites itself.

Every ciphertext records the id of the key that sealed it (a short digest of the key, never the
key), and is bound to its row (scope, owner, name) as associated data, so a ciphertext copied onto
another user's row does not open. The file is re-read on every use (it is tiny), so several API
processes follow a rotation another one made without a restart.

Rotation without downtime (:func:`begin_rotation`, :func:`finish_rotation`): first the ring holds
the new key as current AND the old ones, so every row opens throughout; the service re-encrypts the
rows; only then are the old keys dropped.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets as pysecrets
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from starforge.contract.atomic import write_json_atomic
from starforge.contract.errors import ServerError

ENV_KEY = "STARFORGE_SECRETS_KEY"
KEY_FILE = "secrets.key"
NONCE_BYTES = 12


def key_id(key: bytes) -> str:
    return hashlib.sha256(b"starforge-secrets-key:" + key).hexdigest()[:16]


def new_key() -> bytes:
    return AESGCM.generate_key(bit_length=256)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str, what: str) -> bytes:
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except ValueError as exc:
        raise ServerError(f"{what} is not base64: {exc}") from None
    if len(raw) not in (16, 24, 32):
        raise ServerError(f"{what} must be a 128, 192 or 256-bit AES key (base64)")
    return raw


@dataclass
class KeyRing:
    """The keys that open secrets: ``current`` seals, every key in ``keys`` opens."""

    current: str
    keys: dict[str, bytes]
    from_env: bool = False

    def seal(self, plaintext: str, aad: str) -> tuple[str, str]:
        """(base64 nonce+ciphertext, key id) of ``plaintext`` under the current key."""
        nonce = pysecrets.token_bytes(NONCE_BYTES)
        sealed = AESGCM(self.keys[self.current]).encrypt(nonce, plaintext.encode(), aad.encode())
        return _b64(nonce + sealed), self.current

    def open(self, ciphertext: str, kid: str, aad: str) -> str:
        key = self.keys.get(kid)
        if key is None:
            raise ServerError(
                f"a secret is sealed with key {kid}, which the server no longer has",
                hint=f"restore that key ({ENV_KEY} or {KEY_FILE}) or set the secret again",
            )
        raw = base64.b64decode(ciphertext)
        try:
            return AESGCM(key).decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], aad.encode()).decode()
        except InvalidTag:
            raise ServerError(f"a secret sealed with key {kid} does not open (tampered?)") from None


def key_path(server_dir: Path) -> Path:
    return server_dir / KEY_FILE


def _write_ring(path: Path, current: str, keys: dict[str, bytes]) -> None:
    """Replace the key file atomically and durably, 0600 from its first byte."""
    ring = {"current": current, "keys": {k: _b64(v) for k, v in keys.items()}}
    write_json_atomic(path, ring, mode=0o600)


def _from_env(text: str) -> KeyRing:
    keys = [_unb64(part, ENV_KEY) for part in text.split(",") if part.strip()]
    if not keys:
        raise ServerError(f"{ENV_KEY} is set but holds no key")
    ring = {key_id(k): k for k in keys}
    return KeyRing(current=key_id(keys[0]), keys=ring, from_env=True)


def load(server_dir: Path) -> KeyRing:
    """The ring in force: the environment's, else the key file's (created on first use)."""
    env = os.environ.get(ENV_KEY, "")
    if env.strip():
        return _from_env(env)
    path = key_path(server_dir)
    if not path.exists():
        # On PostgreSQL nothing else may have made the server folder yet (SQLite's file does).
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        key = new_key()
        try:  # O_EXCL: of two processes creating it at once, one wins and the other reads it
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as fh:
                json.dump({"current": key_id(key), "keys": {key_id(key): _b64(key)}}, fh)
    data = json.loads(path.read_text())
    keys = {kid: _unb64(text, f"{path} key {kid}") for kid, text in data["keys"].items()}
    if data["current"] not in keys:
        raise ServerError(f"{path}: the current key {data['current']} is not in the file")
    return KeyRing(current=data["current"], keys=keys)


def begin_rotation(server_dir: Path) -> KeyRing:
    """A ring whose current key is new (or, from the environment, the first one) and that still
    opens everything sealed before; written before any row changes."""
    ring = load(server_dir)
    if ring.from_env:
        return ring  # the operator put the new key first; the old ones still open
    key = new_key()
    kid = key_id(key)
    _write_ring(key_path(server_dir), kid, {**ring.keys, kid: key})
    return load(server_dir)


def finish_rotation(server_dir: Path, ring: KeyRing, still_used: set[str]) -> list[str]:
    """Drop the keys no row uses any more; return their ids (none from the environment)."""
    retired = [kid for kid in ring.keys if kid != ring.current and kid not in still_used]
    if ring.from_env or not retired:
        return [] if ring.from_env else retired
    keep = {k: v for k, v in ring.keys.items() if k not in retired}
    _write_ring(key_path(server_dir), ring.current, keep)
    return retired
