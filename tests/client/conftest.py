"""In-process clients: our :class:`Client` over the app's own transport (no sockets)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from starforge.client.http import Client
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


def alice(transport: httpx.BaseTransport) -> Client:
    return Client("http://testserver", token=TOKENS["alice"], transport=transport)
