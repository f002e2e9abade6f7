"""A user's secret is theirs alone, and its value is written nowhere in clear: not in any API
answer (except the one to the run's own runner), not in the run's files, not in the console,
not in the database file."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from starforge.contract.api import RUN_TOKEN_HEADER
from starforge.contract.secrets import Mount, SecretRequest
from starforge.server.services.scheduling import dispatch
from tests.server.factories import binding, request

from .conftest import ALICE, BOB, ROOT, runtime

VALUE = "hf_isolation-check-7f3a9c1e5b"
FILE_VALUE = "-----BEGIN KEY----- wandb-key-9d8c7b6a -----END KEY-----"


def submit_asking(client: TestClient, headers: dict[str, str], *names: SecretRequest) -> dict:
    req = request(runtime(client))
    req = req.model_copy(update={"spec": req.spec.model_copy(update={"secrets": list(names)})})
    resp = client.post("/jobs", json=req.model_dump(mode="json"), headers=headers)
    return dict(resp.json()) | {"status_code": resp.status_code}


def test_another_user_cannot_list_remove_or_use_a_users_secret(client: TestClient) -> None:
    client.post("/secrets", json={"name": "HF_TOKEN", "value": VALUE}, headers=ALICE)
    assert client.get("/secrets", headers=BOB).json()["secrets"] == []
    assert client.delete("/secrets/HF_TOKEN", headers=BOB).json()["removed"] is False
    assert [s["name"] for s in client.get("/secrets", headers=ALICE).json()["secrets"]] == [
        "HF_TOKEN"
    ]
    used = submit_asking(client, BOB, SecretRequest(name="HF_TOKEN"))
    assert used["status_code"] == 422 and used["details"]["missing_secrets"] == ["HF_TOKEN"]
    assert client.get("/runs", headers=BOB).json()["runs"] == []
    # Nor through alice's run: a user's token is not the run's runner token.
    run = submit_asking(client, ALICE, SecretRequest(name="HF_TOKEN"))
    assert run["status_code"] == 201
    for order in dispatch.schedule_pass(runtime(client)):
        dispatch.start_attempt(runtime(client), order)
    for headers in (BOB, ROOT, ALICE):
        resp = client.post(f"/runs/{run['run_id']}/secrets", json={"attempt": 1}, headers=headers)
        assert resp.status_code == 401 and VALUE not in resp.text


def test_a_secrets_value_is_in_no_answer_no_run_file_and_no_byte_of_the_database(
    client: TestClient,
) -> None:
    rt = runtime(client)
    client.post("/secrets", json={"name": "HF_TOKEN", "value": VALUE}, headers=ALICE)
    client.post("/secrets", json={"name": "KEY_PEM", "value": FILE_VALUE}, headers=ALICE)
    run = submit_asking(
        client,
        ALICE,
        SecretRequest(name="HF_TOKEN"),
        SecretRequest(name="KEY_PEM", mount=Mount.FILE),
    )
    run_id = run["run_id"]
    for order in dispatch.schedule_pass(rt):
        dispatch.start_attempt(rt, order)
    fetched = client.post(
        f"/runs/{run_id}/secrets",
        json={"attempt": 1},
        headers={RUN_TOKEN_HEADER: binding(rt, run_id)["run_token"]},
    )
    assert VALUE in fetched.text  # the one answer that carries it: to the run's own runner
    answers = [
        client.get("/secrets", headers=ALICE),
        client.get("/secrets", headers=ROOT),
        client.get("/runs", headers=ALICE),
        client.get(f"/runs/{run_id}", headers=ALICE),
        client.get(f"/runs/{run_id}", headers=ROOT),
        client.get(f"/runs/{run_id}/logs", headers=ALICE),
        client.get("http://testserver/"),  # the console's page
    ]
    assert all(a.status_code == 200 for a in answers), [a.status_code for a in answers]
    run_json = next(rt.settings.home.rglob("run.json")).read_text()
    assert '"HF_TOKEN"' in run_json and '"KEY_PEM"' in run_json  # the names travel; values never
    for answer in answers:
        assert VALUE not in answer.text and "wandb-key-9d8c7b6a" not in answer.text
    # Every file the server wrote: database (and its journal), run.json, bindings, logs.
    home = rt.settings.home
    files = [p for p in home.rglob("*") if p.is_file() and p.name != "secrets.key"]
    assert any(p.suffix == ".db" for p in files)
    assert any(p.name == "run.json" for p in files)
    leaking = [str(p.relative_to(home)) for p in files if _holds(p)]
    assert leaking == []


def _holds(path: Path) -> bool:
    data = path.read_bytes()
    return VALUE.encode() in data or b"wandb-key-9d8c7b6a" in data
