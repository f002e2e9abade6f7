"""Serving a lab: off loopback the server speaks HTTPS (uvicorn's TLS) or refuses to start.

A real server process on 0.0.0.0 with a self-signed certificate made by ``openssl``; the test
reaches it over HTTPS on 127.0.0.1, verifying the certificate.
"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import Result

pytestmark = [
    pytest.mark.integration,
    pytest.mark.client,
    pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed"),
]


@pytest.fixture
def sf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty home: these tests start their own servers, not the module's shared one."""
    home = tmp_path / "sf-home"
    monkeypatch.setenv("STARFORGE_HOME", str(home))
    monkeypatch.delenv("STARFORGE_SERVER", raising=False)
    return home


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> subprocess.Popen[bytes]:
        cmd = [sys.executable, "-m", "starforge.server", "--home", str(tmp_path / "home")]
        proc = subprocess.Popen([*cmd, *args], stderr=subprocess.PIPE)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)


def served(proc: subprocess.Popen[bytes], tmp_path: Path) -> dict[str, str]:
    """The ``server.json`` of a server that ``server`` started, once it has written it."""
    info_path = tmp_path / "home" / "server" / "server.json"
    deadline = time.monotonic() + 60
    while not info_path.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return dict(json.loads(info_path.read_text()))


def test_plain_http_on_every_address_is_refused_before_anything_listens(
    sf: Callable[..., Result], server: Callable[..., subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    refused = sf("server", "start", "--host", "0.0.0.0")
    assert refused.code == 2 and "refusing to serve plain HTTP on 0.0.0.0" in refused.err
    proc = server("--host", "0.0.0.0", "--port", "0")
    assert proc.wait(timeout=60) == 2
    assert proc.stderr is not None and b"--behind-proxy" in proc.stderr.read()
    assert not (tmp_path / "home" / "server" / "server.json").exists()


def test_with_a_certificate_the_server_answers_over_https_only(
    server: Callable[..., subprocess.Popen[bytes]],
    certificate: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    cert, key = certificate
    proc = server(
        "--host", "0.0.0.0", "--port", "0", "--tls-cert", str(cert), "--tls-key", str(key)
    )
    info = served(proc, tmp_path)
    assert info["url"].startswith("https://0.0.0.0:")
    port = info["url"].rsplit(":", 1)[1]
    trust = ssl.create_default_context(cafile=str(cert))
    got = httpx.get(f"https://127.0.0.1:{port}/api/v1/health", verify=trust, timeout=10)
    assert got.json() == {"ok": True}
    with pytest.raises(httpx.HTTPError):  # no plain HTTP beside it
        httpx.get(f"http://127.0.0.1:{port}/api/v1/health", timeout=10)


def test_the_logs_fast_path_speaks_https_trusting_the_cas_httpx_trusts(
    server: Callable[..., subprocess.Popen[bytes]],
    certificate: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from starforge.cli.fastpath import Wire

    cert, key = certificate
    proc = server("--port", "0", "--tls-cert", str(cert), "--tls-key", str(key))
    url = served(proc, tmp_path)["url"]
    assert url.startswith("https://127.0.0.1:")
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # as httpx: this bundle, when it is set
    with Wire(url, None) as wire:
        assert wire.get_json("/health") == {"ok": True}
    monkeypatch.delenv("SSL_CERT_FILE")
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    with Wire(url, None) as wire, pytest.raises(ssl.SSLCertVerificationError):
        wire.get_json("/health")  # certifi's bundle (httpx's default) does not hold it
