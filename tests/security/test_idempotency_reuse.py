"""A reused idempotency key: the same body replays its run, a different body is a 409."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.server.factories import request

from .conftest import ALICE, runtime, wire


def test_a_key_reused_with_a_different_body_is_409_naming_the_first_run(
    client: TestClient,
) -> None:
    rt = runtime(client)
    first = request(rt, key="key-00000001").model_dump(mode="json")
    made = client.post("/jobs", json=first, headers=ALICE)
    assert made.status_code == 201
    run_id = made.json()["run_id"]

    other = request(rt, key="key-00000001", experiment="other").model_dump(mode="json")
    resp = client.post("/jobs", json=other, headers=ALICE)
    err = wire(resp)
    assert resp.status_code == 409 and err["code"] == "submit.idempotency_conflict"
    assert run_id in err["message"] and err["details"]["run_id"] == run_id

    replay = client.post("/jobs", json=first, headers=ALICE)
    assert replay.status_code == 200
    assert replay.json()["run_id"] == run_id and replay.json()["created"] is False
    assert [r["run_id"] for r in client.get("/runs", headers=ALICE).json()["runs"]] == [run_id]


def test_a_key_reused_with_other_retries_is_a_different_request(client: TestClient) -> None:
    body = request(runtime(client), key="key-00000002").model_dump(mode="json")
    assert client.post("/jobs", json=body, headers=ALICE).status_code == 201
    resp = client.post("/jobs", json={**body, "max_retries": 7}, headers=ALICE)
    assert resp.status_code == 409
    assert len(client.get("/runs", headers=ALICE).json()["runs"]) == 1
