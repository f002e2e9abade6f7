"""Secrets through the API (TestClient, no sockets): set, list, remove, the lab's secrets, the
runner's fetch at start, and the admission check of the secrets a run asks for."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from starforge.contract.api import API_PREFIX, RUN_TOKEN_HEADER
from starforge.contract.secrets import Mount, SecretRequest
from starforge.server.app import create_app
from starforge.server.runtime import Runtime
from starforge.server.services.access import users
from starforge.server.services.scheduling import dispatch
from starforge.server.settings import Settings

from .factories import TOKENS, FakeExecutor, binding, report, request

ALICE = {"Authorization": f"Bearer {TOKENS['alice']}"}
BOB = {"Authorization": f"Bearer {TOKENS['bob']}"}
ROOT = {"Authorization": "Bearer root-token"}
VALUE = "hf_alice-secret-value-0123456789"


@pytest.fixture
def client(settings: Settings, executor: FakeExecutor) -> Iterator[TestClient]:
    app = create_app(
        settings.model_copy(update={"embedded": False}), executor=executor, run_loops=False
    )
    with TestClient(app, base_url="http://testserver" + API_PREFIX) as c:
        rt: Runtime = app.state.runtime
        rt.pick_port = lambda: 40000  # no sockets in unit tests
        with rt.transaction() as session:
            for name, token in {**TOKENS, "root": "root-token"}.items():
                users.ensure_user(session, name, token)
            users.make_admin(session, "root")
        yield c


def runtime(client: TestClient) -> Runtime:
    return client.app.state.runtime  # type: ignore[attr-defined,no-any-return]


def submit_asking(client: TestClient, headers: dict[str, str], *secrets: SecretRequest) -> Any:
    req = request(runtime(client))
    req = req.model_copy(update={"spec": req.spec.model_copy(update={"secrets": list(secrets)})})
    return client.post("/jobs", json=req.model_dump(mode="json"), headers=headers)


def start_all(rt: Runtime) -> None:
    for order in dispatch.schedule_pass(rt):
        dispatch.start_attempt(rt, order)


def fetch(client: TestClient, run_id: str, token: str, attempt: int = 1) -> Any:
    return client.post(
        f"/runs/{run_id}/secrets", json={"attempt": attempt}, headers={RUN_TOKEN_HEADER: token}
    )


def test_a_set_secret_is_listed_by_name_and_scope_never_by_value(client: TestClient) -> None:
    made = client.post("/secrets", json={"name": "HF_TOKEN", "value": VALUE}, headers=ALICE)
    assert made.status_code == 200 and VALUE not in made.text
    listed = client.get("/secrets", headers=ALICE)
    assert [(s["name"], s["scope"], s["owner"]) for s in listed.json()["secrets"]] == [
        ("HF_TOKEN", "user", "alice")
    ]
    assert VALUE not in listed.text
    gone = client.delete("/secrets/HF_TOKEN", headers=ALICE).json()
    assert gone == {"name": "HF_TOKEN", "scope": "user", "removed": True}
    assert client.get("/secrets", headers=ALICE).json()["secrets"] == []


def test_setting_again_replaces_the_value_and_keeps_the_creation_date(client: TestClient) -> None:
    first = client.post("/secrets", json={"name": "K", "value": "one-1"}, headers=ALICE).json()
    second = client.post("/secrets", json={"name": "K", "value": "two-2"}, headers=ALICE).json()
    assert second["created_at"] == first["created_at"]
    assert second["updated_at"] >= first["updated_at"]
    assert len(client.get("/secrets", headers=ALICE).json()["secrets"]) == 1


def test_a_name_that_is_no_environment_variable_is_refused(client: TestClient) -> None:
    resp = client.post("/secrets", json={"name": "HF-TOKEN", "value": "x"}, headers=ALICE)
    assert resp.status_code in (400, 422)
    assert "HF-TOKEN" in resp.text


def test_only_an_admin_sets_a_lab_wide_secret_which_every_user_sees_by_name(
    client: TestClient,
) -> None:
    body = {"name": "WANDB_API_KEY", "value": "lab-wide-value", "lab": True}
    refused = client.post("/secrets", json=body, headers=ALICE)
    assert refused.status_code == 403 and "admins" in refused.json()["message"]
    assert client.post("/secrets", json=body, headers=ROOT).status_code == 200
    seen = client.get("/secrets", headers=BOB).json()["secrets"]
    assert [(s["name"], s["scope"]) for s in seen] == [("WANDB_API_KEY", "lab")]
    assert client.delete("/secrets/WANDB_API_KEY?lab=true", headers=BOB).status_code == 403


def test_a_run_asking_for_a_secret_that_does_not_exist_is_rejected_naming_it(
    client: TestClient,
) -> None:
    resp = submit_asking(client, ALICE, SecretRequest(name="HF_TOKEN"))
    assert resp.status_code == 422
    body = resp.json()
    assert body["code"] == "admission.rejected"
    assert "HF_TOKEN" in body["message"] and "sf secret set HF_TOKEN" in body["hint"]
    assert body["details"]["missing_secrets"] == ["HF_TOKEN"]
    assert client.get("/runs", headers=ALICE).json()["runs"] == []


def test_the_runner_gets_the_values_of_its_runs_secrets_while_the_attempt_starts_or_runs(
    client: TestClient,
) -> None:
    rt = runtime(client)
    client.post("/secrets", json={"name": "HF_TOKEN", "value": VALUE}, headers=ALICE)
    client.post("/secrets", json={"name": "OTHER", "value": "not-asked-for"}, headers=ALICE)
    asked = SecretRequest(name="HF_TOKEN", mount=Mount.FILE)
    resp = submit_asking(client, ALICE, asked)
    assert resp.status_code == 201, resp.text
    run_id = resp.json()["run_id"]
    start_all(rt)
    bound = binding(rt, run_id)
    got = fetch(client, run_id, bound["run_token"])
    assert got.status_code == 200 and got.headers["cache-control"] == "no-store"
    assert got.json()["secrets"] == [{"name": "HF_TOKEN", "mount": "file", "value": VALUE}]
    # The job's own token, a user's token, another attempt: nothing.
    assert fetch(client, run_id, bound["job_token"]).status_code == 403
    assert (
        client.post(f"/runs/{run_id}/secrets", json={"attempt": 1}, headers=ALICE).status_code
        == 401
    )
    assert fetch(client, run_id, bound["run_token"], attempt=2).status_code == 403
    report(rt, run_id, "running")
    assert fetch(client, run_id, bound["run_token"]).status_code == 200
    report(rt, run_id, "exited", exit_code=0)
    assert fetch(client, run_id, bound["run_token"]).status_code == 403


def test_a_users_own_secret_wins_over_the_labs_of_the_same_name(client: TestClient) -> None:
    rt = runtime(client)
    lab = {"name": "HF_TOKEN", "value": "the-labs-value", "lab": True}
    client.post("/secrets", json=lab, headers=ROOT)
    client.post("/secrets", json={"name": "HF_TOKEN", "value": VALUE}, headers=ALICE)
    alice_run = submit_asking(client, ALICE, SecretRequest(name="HF_TOKEN")).json()["run_id"]
    bob_run = submit_asking(client, BOB, SecretRequest(name="HF_TOKEN")).json()["run_id"]
    start_all(rt)
    alice = fetch(client, alice_run, binding(rt, alice_run)["run_token"]).json()["secrets"]
    bob = fetch(client, bob_run, binding(rt, bob_run)["run_token"]).json()["secrets"]
    assert [s["value"] for s in alice] == [VALUE]
    assert [s["value"] for s in bob] == ["the-labs-value"]
