"""What one user can learn of another's uploads and runs: nothing beyond capacity figures."""

from __future__ import annotations

import hashlib

from fastapi.testclient import TestClient

from starforge.server.settings import Settings
from tests.server.factories import request, running_run

from .conftest import ALICE, BOB, ROOT, runtime, wire

SECRET = b"alice's private training data\n"
DIGEST = hashlib.sha256(SECRET).hexdigest()


def _missing(client: TestClient, headers: dict[str, str]) -> list[str]:
    resp = client.post("/blobs/missing", json={"digests": [DIGEST]}, headers=headers)
    return list(resp.json()["missing"])


def test_whether_the_store_holds_a_blob_is_answered_per_user(
    client: TestClient, settings: Settings
) -> None:
    assert client.put(f"/blobs/{DIGEST}", content=SECRET, headers=ALICE).status_code == 201
    assert _missing(client, ALICE) == []
    assert _missing(client, BOB) == [DIGEST]  # bob cannot tell that alice stored it

    # Claiming it with other content proves nothing and changes nothing.
    resp = client.put(f"/blobs/{DIGEST}", content=b"a guess", headers=BOB)
    assert resp.status_code == 400 and wire(resp)["code"] == "blobs.digest_mismatch"
    assert _missing(client, BOB) == [DIGEST]
    assert settings.storage.joinpath("blobs", "sha256", DIGEST[:2], DIGEST[2:]).read_bytes() == (
        SECRET
    )

    # Sending the content itself makes it bob's too, with still one copy in the store.
    assert client.put(f"/blobs/{DIGEST}", content=SECRET, headers=BOB).status_code == 201
    assert _missing(client, BOB) == []
    assert [p.name for p in settings.storage.joinpath("blobs").rglob("*") if p.is_file()] == [
        DIGEST[2:]
    ]


def test_cluster_status_shows_another_users_runs_to_nobody_but_admins(
    client: TestClient,
) -> None:
    run_id = running_run(runtime(client))  # alice's

    def listed(headers: dict[str, str]) -> list[str]:
        status = client.get("/cluster/status", headers=headers).json()
        return [r for node in status["nodes"] for r in node["runs"]]

    assert listed(ALICE) == [run_id]
    assert listed(ROOT) == [run_id]
    assert listed(BOB) == []
    # The capacity figures stay the same for everyone.
    bob_view = client.get("/cluster/status", headers=BOB).json()
    assert sum(n["used"] for n in bob_view["nodes"]) == 8


def test_a_package_may_not_use_a_blob_another_user_uploaded(client: TestClient) -> None:
    assert client.put(f"/blobs/{DIGEST}", content=SECRET, headers=ALICE).status_code == 201
    body = request(runtime(client)).model_dump(mode="json")
    body["manifest"]["files"].append(
        {"path": "experiments/exp/stolen.txt", "sha256": DIGEST, "size": len(SECRET)}
    )
    resp = client.post("/jobs", json=body, headers=BOB)
    assert resp.status_code == 422 and wire(resp)["code"] == "admission.missing_blobs"
    assert wire(resp)["details"]["missing"] == [DIGEST]
    assert client.get("/runs", headers=BOB).json()["runs"] == []
    assert client.post("/jobs", json=body, headers=ALICE).status_code == 201  # hers to use
