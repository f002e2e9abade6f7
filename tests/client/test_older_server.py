"""Today's client against an older server: a route the server does not have yet is refused in one
line that says the server may be older (an in-memory transport plays it: no sockets)."""

from __future__ import annotations

import httpx
import pytest

from starforge import __version__
from starforge.client.http import Client
from starforge.contract import api
from starforge.contract.errors import NotFound


def older_server() -> Client:
    def handle(request: httpx.Request) -> httpx.Response:
        # What every StarForge server answers for a path it has no route for.
        message = f"no such endpoint: {request.method} {request.url.path}"
        return httpx.Response(404, json={"code": "not_found", "message": message, "hint": None})

    return Client("http://older.test", token="t", transport=httpx.MockTransport(handle))


def test_a_route_the_server_lacks_is_one_error_saying_it_may_be_older() -> None:
    with older_server() as client, pytest.raises(NotFound) as raised:
        client.profiles()
    assert raised.value.message == f"no such endpoint: GET {api.API_PREFIX}/profiles"
    assert raised.value.hint == (
        f"the server may be older than this client ({__version__}): `sf server status` shows "
        "its version (docs/releases.md)"
    )


def test_a_missing_run_keeps_its_own_message_and_no_version_hint() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        body = {"code": "runs.not_found", "message": "no run r-1", "hint": "sf job ls"}
        return httpx.Response(404, json=body)

    client = Client("http://older.test", token="t", transport=httpx.MockTransport(handle))
    with client, pytest.raises(NotFound) as raised:
        client.get_run("r-1")
    assert (raised.value.message, raised.value.hint) == ("no run r-1", "sf job ls")
