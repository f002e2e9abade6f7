"""The oldest client a server accepts: the built-in floor, and the bar an admin raises for users
(``min_client_version``) while runners of the previous release keep reporting (TestClient, no
sockets)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from starforge import __version__
from starforge.contract.api import (
    API_PREFIX,
    CLIENT_VERSION_HEADER,
    MIN_CLIENT_VERSION,
    RUN_TOKEN_HEADER,
)
from starforge.server.app import create_app
from starforge.server.runtime import Runtime
from starforge.server.services.access import users
from starforge.server.services.scheduling import dispatch
from starforge.server.settings import Settings

from .factories import TOKENS, FakeExecutor, binding, request, run_row

ALICE = {"Authorization": f"Bearer {TOKENS['alice']}"}


def old(headers: dict[str, str] | None = None, version: str = "0.1.0") -> dict[str, str]:
    return {**(headers or {}), CLIENT_VERSION_HEADER: version}


@pytest.fixture
def client(settings: Settings, executor: FakeExecutor) -> Iterator[TestClient]:
    """A server whose admin requires 0.2.0 of users' clients."""
    raised = settings.model_copy(update={"embedded": False, "min_client_version": "0.2.0"})
    app = create_app(raised, executor=executor, run_loops=False)
    with TestClient(app, base_url="http://testserver" + API_PREFIX) as c:
        rt: Runtime = app.state.runtime
        rt.pick_port = lambda: 40000  # no sockets in unit tests
        with rt.transaction() as session:
            for name, token in TOKENS.items():
                users.ensure_user(session, name, token)
        yield c


def test_a_client_below_the_admins_minimum_gets_one_line_naming_the_upgrade(
    client: TestClient,
) -> None:
    resp = client.get("/runs", headers=old(ALICE))
    assert resp.status_code == 426
    body = resp.json()
    assert body["code"] == "version.client_too_old"
    assert body["message"] == (
        f"client 0.1.0 is older than 0.2.0, the oldest this server ({__version__}) accepts: "
        "upgrade it with pip install -U 'starforge>=0.2.0'"
    )
    assert body["hint"] is None  # the message is the one line every client prints
    assert client.get("/runs", headers=old(ALICE, "0.2.0")).status_code == 200


def test_health_and_info_answer_an_old_client_and_name_the_minimum(client: TestClient) -> None:
    """An old client must still find the server (/health) and learn what it needs (/info)."""
    assert client.get("/health", headers=old()).json() == {"ok": True}
    info = client.get("/info", headers=old()).json()
    assert (info["version"], info["min_client"]) == (__version__, "0.2.0")


def test_the_previous_releases_runner_keeps_reporting_past_the_admins_minimum(
    client: TestClient,
) -> None:
    rt: Runtime = client.app.state.runtime  # type: ignore[attr-defined]
    body = request(rt, key="key-00000001").model_dump(mode="json")
    run_id = client.post("/jobs", json=body, headers=old(ALICE, "0.2.0")).json()["run_id"]
    for order in dispatch.schedule_pass(rt):
        dispatch.start_attempt(rt, order)
    token = old({RUN_TOKEN_HEADER: binding(rt, run_id)["run_token"]})
    url = f"/runs/{run_id}/lifecycle"
    assert client.post(url, json={"attempt": 1, "event": "running"}, headers=token).json()[
        "accepted"
    ]
    done = {"attempt": 1, "event": "exited", "exit_code": 0}
    assert client.post(url, json=done, headers=token).json()["accepted"]
    assert run_row(rt, run_id).status == "succeeded"


def test_a_runner_below_the_built_in_floor_is_refused(client: TestClient) -> None:
    rt: Runtime = client.app.state.runtime  # type: ignore[attr-defined]
    body = request(rt, key="key-00000002").model_dump(mode="json")
    run_id = client.post("/jobs", json=body, headers=ALICE).json()["run_id"]
    for order in dispatch.schedule_pass(rt):
        dispatch.start_attempt(rt, order)
    token = old({RUN_TOKEN_HEADER: binding(rt, run_id)["run_token"]}, "0.0.9")
    resp = client.post(f"/runs/{run_id}/lifecycle", json={"attempt": 1, "event": "running"},
                       headers=token)  # fmt: skip
    assert resp.status_code == 426
    assert f"older than {MIN_CLIENT_VERSION}" in resp.json()["message"]


@pytest.mark.parametrize("value", ["0.0.9", "latest", ""])
def test_the_minimum_is_a_version_no_lower_than_the_built_in_one(
    settings: Settings, value: str
) -> None:
    with pytest.raises(ValidationError, match="min_client_version"):
        Settings.model_validate({**settings.model_dump(), "min_client_version": value})
