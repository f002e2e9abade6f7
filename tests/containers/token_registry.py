"""A registry as Docker Hub, ghcr.io and nvcr.io run them, on 127.0.0.1: the project's
``docker-registry`` (Debian's distribution 2.8, as ``scripts/registry.sh`` installs it) with
``auth: token``, in front of a small real token service this module runs.

The registry answers every anonymous request with ``401`` and ``WWW-Authenticate: Bearer
realm=...,service=...,scope=...``; the token service issues JWTs (RS256, the signing certificate
in the ``x5c`` header, the registry trusting that self-signed certificate as its
``rootcertbundle``) for the scopes it grants:

- a user of ``users`` (HTTP Basic on the realm) gets pull and push; a wrong password is a 401;
- without credentials, ``anonymous`` says what happens: ``"pull"`` grants pull (a public image),
  ``"refuse"`` answers 401 (a service that demands credentials), ``"nothing"`` answers a token
  with no access (Docker Hub's answer for a private repository: the registry then says 401).

Every request the token service served is in ``requests`` (who asked, for which scope), so a test
sees who fetched tokens, and never a password.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

SERVICE = "sf-test-registry"
ISSUER = "sf-test-token-service"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class Signer:
    """An RSA key and its self-signed certificate: signs the tokens the registry trusts."""

    key: rsa.RSAPrivateKey
    cert: x509.Certificate

    @classmethod
    def new(cls) -> Signer:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ISSUER)])
        now = dt.datetime.now(dt.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256())
        )
        return cls(key, cert)

    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def token(self, subject: str, access: list[dict[str, object]]) -> str:
        der = self.cert.public_bytes(serialization.Encoding.DER)
        header = {"typ": "JWT", "alg": "RS256", "x5c": [base64.b64encode(der).decode()]}
        now = int(time.time())
        claims = {
            "iss": ISSUER,
            "sub": subject,
            "aud": SERVICE,
            "exp": now + 300,
            "nbf": now - 10,
            "iat": now,
            "jti": uuid.uuid4().hex,
            "access": access,
        }
        signing_input = ".".join(
            _b64url(json.dumps(part, separators=(",", ":")).encode()) for part in (header, claims)
        )
        signature = self.key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{_b64url(signature)}"


@dataclass
class Served:
    user: str  # "" for an anonymous request; "!name" for a refused login
    scopes: list[str]


@dataclass
class TokenService:
    signer: Signer
    users: dict[str, str] = field(default_factory=dict)
    anonymous: str = "pull"  # pull | refuse | nothing
    token_key: str = "token"  # the answer's field: token, or OAuth2's access_token
    requests: list[Served] = field(default_factory=list)

    def answer(
        self, authorization: str, query: dict[str, list[str]]
    ) -> tuple[int, dict[str, object]]:
        scopes = query.get("scope", [])
        user = ""
        if authorization.startswith("Basic "):
            name, _, password = base64.b64decode(authorization[6:]).decode().partition(":")
            if self.users.get(name) != password:
                self.requests.append(Served(f"!{name}", scopes))
                return 401, {}
            user = name
        self.requests.append(Served(user, scopes))
        if not user and self.anonymous == "refuse":
            return 401, {}
        granted = ["pull", "push"] if user else ["pull"] if self.anonymous == "pull" else []
        access = []
        for scope in scopes:
            kind, _, rest = scope.partition(":")
            name, _, actions = rest.rpartition(":")
            allowed = [a for a in actions.split(",") if a in granted]
            if kind == "repository" and allowed:
                access.append({"type": kind, "name": name, "actions": allowed})
        token = self.signer.token(user or "anonymous", access)
        return 200, {self.token_key: token, "expires_in": 300}

    def pulled_by(self, user: str) -> int:
        pulls = [r for r in self.requests if any(":pull" in s for s in r.scopes)]
        return sum(1 for r in pulls if r.user == user)


def _handler(service: TokenService) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlparse(self.path)
            if url.path != "/token":
                self.send_error(404)
                return
            given = self.headers.get("Authorization", "")
            status, body = service.answer(given, parse_qs(url.query))
            data = json.dumps(body).encode()
            self.send_response(status)
            if status == 401:
                self.send_header("WWW-Authenticate", 'Basic realm="sf-test-token-service"')
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass  # quiet: a test reads ``requests``

    return Handler


@dataclass
class TokenRegistry:
    address: str  # 127.0.0.1:PORT, as image references name it
    service: TokenService
    realm: str
    log: Path

    def push_token(self, repository: str) -> str:
        return self.service.signer.token("pusher", [
            {"type": "repository", "name": repository, "actions": ["pull", "push"]}
        ])  # fmt: skip


def require_registry_binary() -> str:
    found = shutil.which("docker-registry")
    if found is None:
        message = "docker-registry is not installed (bash scripts/registry.sh start installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


@contextmanager
def token_registry(folder: Path, *, realm: str = "") -> Iterator[TokenRegistry]:
    """A docker-registry with ``auth: token`` on a free port, its token service on another
    (``realm`` overrides where the registry sends clients for tokens). Both end on exit."""
    binary = require_registry_binary()
    folder.mkdir(parents=True, exist_ok=True)
    signer = Signer.new()
    (folder / "token-cert.pem").write_bytes(signer.cert_pem())
    service = TokenService(signer)
    tokens = ThreadingHTTPServer(("127.0.0.1", 0), _handler(service))
    threading.Thread(target=tokens.serve_forever, daemon=True).start()
    realm = realm or f"http://127.0.0.1:{tokens.server_address[1]}/token"
    port = free_port()
    config = folder / "config.yml"
    config.write_text(
        f"""version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: {folder / "data"}
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
auth:
  token:
    realm: {realm}
    service: {SERVICE}
    issuer: {ISSUER}
    rootcertbundle: {folder / "token-cert.pem"}
"""
    )
    log = folder / "registry.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([binary, "serve", str(config)], stdout=out, stderr=out)
    try:
        _wait_up(f"http://127.0.0.1:{port}/v2/", proc, log)
        yield TokenRegistry(f"127.0.0.1:{port}", service, realm, log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        tokens.shutdown()
        tokens.server_close()


def _wait_up(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Until the registry answers /v2/ (with its 401 challenge): it is up."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"docker-registry exited: {log.read_text()}")
        try:
            if httpx.get(url, timeout=1).status_code == 401:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"docker-registry did not answer at {url}: {log.read_text()}")
