"""Requests from the oldest client the server accepts are admitted; unknown fields are refused.

A client that predates a field leaves it out, and the server fills in the default. A field the
server does not know is a typo or a newer client's: either way it is refused with its path,
never dropped silently (through FastAPI's TestClient: no sockets).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from starforge.contract.api import API_PREFIX, CLIENT_VERSION_HEADER, MIN_CLIENT_VERSION
from starforge.server.app import create_app
from starforge.server.runtime import Runtime
from starforge.server.services.access import users
from starforge.server.settings import Settings

from .factories import TOKENS, FakeExecutor, request

ALICE = {"Authorization": f"Bearer {TOKENS['alice']}"}
OLDEST_CLIENT = {**ALICE, CLIENT_VERSION_HEADER: MIN_CLIENT_VERSION}


@pytest.fixture
def client(settings: Settings, executor: FakeExecutor) -> Iterator[TestClient]:
    app = create_app(
        settings.model_copy(update={"embedded": False}), executor=executor, run_loops=False
    )
    with TestClient(app, base_url="http://testserver" + API_PREFIX) as c:
        rt: Runtime = app.state.runtime
        rt.pick_port = lambda: 40000  # no sockets in unit tests
        with rt.transaction() as session:
            for name, token in TOKENS.items():
                users.ensure_user(session, name, token)
        yield c


def body(client: TestClient) -> dict[str, Any]:
    rt: Runtime = client.app.state.runtime  # type: ignore[attr-defined]
    return request(rt, key="key-00000001").model_dump(mode="json")


def as_older_client(data: dict[str, Any]) -> dict[str, Any]:
    """The request without the optional fields added after the first release."""
    data.pop("max_retries")
    spec = data["spec"]
    spec["provenance"].pop("untracked")
    for field in ("framework_version", "runtime_id", "bindings"):
        spec["method"].pop(field)
    return data


def test_a_submission_from_the_oldest_supported_client_is_admitted(client: TestClient) -> None:
    resp = client.post("/jobs", json=as_older_client(body(client)), headers=OLDEST_CLIENT)
    assert resp.status_code == 201, resp.text
    run = client.get(f"/runs/{resp.json()['run_id']}", headers=OLDEST_CLIENT).json()
    assert run["status"] == "queued"
    assert run["spec"]["provenance"]["untracked"] == [] and run["spec"]["method"]["bindings"] == {}


@pytest.mark.parametrize("where", [(), ("spec",), ("spec", "provenance")])
def test_a_submission_with_an_unknown_field_is_refused_with_its_path(
    client: TestClient, where: tuple[str, ...]
) -> None:
    data = body(client)
    target = data
    for key in where:
        target = target[key]
    target["signed_by"] = "ci"
    resp = client.post("/jobs", json=data, headers=ALICE)
    assert resp.status_code == 400
    assert resp.json()["code"] == "usage.invalid_spec"
    assert ".".join((*where, "signed_by")) in resp.json()["message"]
