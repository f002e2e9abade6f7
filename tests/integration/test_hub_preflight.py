"""The gated-model preflight at admission, against a stand-in hub on 127.0.0.1 (the real
``huggingface_hub`` client speaks to it): public, gated with access, gated without access and
missing models, each an acceptance or a rejection that creates nothing."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from starforge.contract.api import API_PREFIX
from starforge.contract.jobspec import InputKind, InputRef, Inputs
from starforge.server.app import create_app
from starforge.server.runtime import Runtime
from starforge.server.services.access import users
from starforge.server.settings import load_settings
from tests.hub_stub import Hub, serve_hub
from tests.postgres.databases import Databases
from tests.server.factories import INVENTORY, PROFILES, TOKENS, FakeExecutor, request

pytestmark = pytest.mark.integration
ALICE = {"Authorization": f"Bearer {TOKENS['alice']}"}
GRANTED = "hf_granted-token-0001"


@pytest.fixture(autouse=True)
def _own_database(databases: Databases | None, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test's server has its own home, hence its own secrets key: on PostgreSQL it gets its
    own database too, or a secret sealed by one test's key would meet another test's server."""
    if databases is None:
        yield
        return
    url = databases.fresh()
    monkeypatch.setenv("STARFORGE_DATABASE_URL", url)
    yield
    databases.drop(url)


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[Hub]:
    # The suite runs with HF_HUB_OFFLINE=1, which huggingface_hub reads once at import: these
    # tests are the ones that turn the hub on, for the stand-in only.
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    with serve_hub({"org/public"}, {"org/gated": {GRANTED}}) as served:
        yield served


def client_for(tmp_path: Path, hub_url: str, mode: str = "on") -> TestClient:
    settings = load_settings(
        tmp_path / "home",
        inventory=INVENTORY,
        profiles=PROFILES,
        url="http://127.0.0.1:9999",
        embedded=False,
        hub_preflight=mode,
        hf_endpoint=hub_url,
        registry_timeout_s=2.0,
    )
    return TestClient(
        create_app(settings, executor=FakeExecutor(), run_loops=False),
        base_url="http://testserver" + API_PREFIX,
    )


@pytest.fixture
def client(tmp_path: Path, hub: Hub) -> Iterator[TestClient]:
    with client_for(tmp_path, hub.url) as c:
        add_users(c)
        yield c


def add_users(c: TestClient) -> None:
    rt: Runtime = c.app.state.runtime  # type: ignore[attr-defined]
    rt.pick_port = lambda: 40000
    with rt.transaction() as session:
        for name, token in TOKENS.items():
            users.ensure_user(session, name, token)


def submit_model(c: TestClient, model: str) -> Any:
    rt: Runtime = c.app.state.runtime  # type: ignore[attr-defined]
    inputs = Inputs(model=InputRef(kind=InputKind.HUB, value=model))
    body = request(rt, inputs=inputs).model_dump(mode="json")
    return c.post("/jobs", json=body, headers=ALICE)


def runs(c: TestClient) -> list[Any]:
    return list(c.get("/runs", headers=ALICE).json()["runs"])


def no_runs(c: TestClient) -> bool:
    return runs(c) == []


def test_a_public_model_is_admitted(client: TestClient, hub: Hub) -> None:
    resp = submit_model(client, "org/public")
    assert resp.status_code == 201, resp.text
    assert any(path.startswith("/api/models/org/public") for path, _ in hub.requests)


def test_a_missing_model_is_rejected_and_nothing_is_created(client: TestClient) -> None:
    resp = submit_model(client, "org/missing")
    assert resp.status_code == 422
    body = resp.json()
    assert "org/missing was not found on the hub" in body["message"]
    assert body["details"]["preflight"] == "not_found"
    assert no_runs(client)


def test_a_gated_model_without_access_is_rejected_with_the_page_to_request_it(
    client: TestClient, hub: Hub
) -> None:
    resp = submit_model(client, "org/gated")
    assert resp.status_code == 422
    body = resp.json()
    assert "org/gated is gated" in body["message"] and "no HF_TOKEN" in body["message"]
    assert f"{hub.url}/org/gated" in body["hint"]
    assert body["details"]["access_page"] == f"{hub.url}/org/gated"
    assert no_runs(client)
    # A token that was not granted access is no better, and it is the user's, sent to the hub.
    client.post("/secrets", json={"name": "HF_TOKEN", "value": "hf_not-granted"}, headers=ALICE)
    again = submit_model(client, "org/gated")
    assert again.status_code == 422 and "has no access" in again.json()["message"]
    assert ("/api/models/org/gated/auth-check", "Bearer hf_not-granted") in hub.requests
    assert no_runs(client)


def test_a_gated_model_is_admitted_with_the_users_granted_hf_token(
    client: TestClient, hub: Hub
) -> None:
    client.post("/secrets", json={"name": "HF_TOKEN", "value": GRANTED}, headers=ALICE)
    resp = submit_model(client, "org/gated")
    assert resp.status_code == 201, resp.text
    assert ("/api/models/org/gated/auth-check", f"Bearer {GRANTED}") in hub.requests


def test_an_unreachable_hub_warns_unless_the_settings_are_strict(tmp_path: Path, hub: Hub) -> None:
    closed = "http://127.0.0.1:9"  # discard port: nothing listens
    with client_for(tmp_path / "on", closed) as c:
        add_users(c)
        resp = submit_model(c, "org/public")
        assert resp.status_code == 201, resp.text
        assert any("could not check model org/public" in w for w in resp.json()["warnings"])
    with client_for(tmp_path / "strict", closed, mode="strict") as c:
        add_users(c)
        resp = submit_model(c, "org/public")
        assert resp.status_code == 422 and resp.json()["details"]["preflight"] == "unreachable"
        on_postgres = bool(os.environ.get("STARFORGE_DATABASE_URL"))
        assert len(runs(c)) == (1 if on_postgres else 0)  # one database for both servers there


def test_with_the_preflight_off_the_hub_is_never_asked(tmp_path: Path, hub: Hub) -> None:
    with client_for(tmp_path, hub.url, mode="off") as c:
        add_users(c)
        assert submit_model(c, "org/missing").status_code == 201
    assert hub.requests == []
