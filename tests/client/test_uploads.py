"""Uploading a package: small files in batches, big ones one each, older servers still served."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from starforge.client import uploads
from starforge.client.http import Client
from starforge.contract import blobbatch
from starforge.contract.jobspec import FileEntry
from starforge.server.settings import load_settings
from tests.security.conftest import TOKENS, client_for
from tests.server.factories import INVENTORY, PROFILES


class Counting(httpx.BaseTransport):
    """The in-process app's transport, counting requests by (method, first path parts)."""

    def __init__(self, inner: httpx.BaseTransport, refuse_batches: bool = False) -> None:
        self.inner = inner
        self.refuse_batches = refuse_batches
        self.calls: Counter[str] = Counter()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        kind = "batch" if path.endswith("/blobs/batch") else path.rsplit("/", 1)[-1][:5]
        self.calls[f"{request.method} {kind}"] += 1
        if self.refuse_batches and kind == "batch":  # a server from before batches
            return httpx.Response(404, json={"code": "not_found", "message": "no such endpoint"})
        answer = self.inner.handle_request(request)
        answer.read()  # starlette's stream, as the plain bytes httpx.Client expects
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)


@pytest.fixture
def app_transport(tmp_path: Path) -> Iterator[httpx.BaseTransport]:
    settings = load_settings(
        tmp_path / "home",
        inventory=INVENTORY,
        profiles=PROFILES,
        url="http://127.0.0.1:9999",
        embedded=False,
    )
    with client_for(settings) as test_client:
        yield test_client._transport


def _package(root: Path, small: int, big_bytes: int) -> list[FileEntry]:
    files = {f"f{i:04d}.txt": f"line {i}\n".encode() for i in range(small)}
    files["big.bin"] = b"z" * big_bytes
    entries = []
    for name, data in files.items():
        (root / name).write_bytes(data)
        digest = hashlib.sha256(data).hexdigest()
        entries.append(FileEntry(path=name, sha256=digest, size=len(data)))
    return entries


def _client(transport: httpx.BaseTransport) -> Client:
    return Client("http://testserver", token=TOKENS["alice"], transport=transport)


def test_small_files_go_in_one_batch_and_a_big_one_alone(
    app_transport: httpx.BaseTransport, tmp_path: Path
) -> None:
    entries = _package(tmp_path, 300, blobbatch.SMALL_BLOB_BYTES + 1)
    counting = Counting(app_transport)
    sent: list[int] = []
    with _client(counting) as client:
        uploads.upload_files(client, tmp_path, entries, sent.append)
        assert client.missing_blobs([e.sha256 for e in entries]) == []
    assert counting.calls["POST batch"] == 1
    assert counting.calls["PUT " + entries[-1].sha256[:5]] == 1
    assert sum(sent) == sum(e.size for e in entries)


def test_an_older_server_gets_one_request_per_file(
    app_transport: httpx.BaseTransport, tmp_path: Path
) -> None:
    entries = _package(tmp_path, 20, 10)
    counting = Counting(app_transport, refuse_batches=True)
    with _client(counting) as client:
        uploads.upload_files(client, tmp_path, entries)
        assert client.missing_blobs([e.sha256 for e in entries]) == []
    assert counting.calls["POST batch"] == 1  # tried once, then never again
    assert sum(n for k, n in counting.calls.items() if k.startswith("PUT")) == 21
