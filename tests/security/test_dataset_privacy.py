"""Attacks on platform datasets through the API: another user's private dataset answers exactly
like an unknown one everywhere, and a pushed manifest cannot name a path outside the dataset."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from fastapi.testclient import TestClient

from starforge.contract.jobspec import InputKind, InputRef, Inputs
from tests.server.factories import request

from .conftest import ALICE, BOB, runtime, wire

DATA = b'{"prompt": "secret eval set"}\n'
DIGEST = hashlib.sha256(DATA).hexdigest()


def _push(client: TestClient, headers: dict[str, str], name: str, **extra: Any) -> Any:
    assert client.put(f"/blobs/{DIGEST}", content=DATA, headers=headers).status_code == 201
    files = [{"path": "test.jsonl", "sha256": DIGEST, "size": len(DATA)}]
    return client.post(
        "/datasets", json={"name": name, "version": "v1", "files": files, **extra}, headers=headers
    )


def _same_but_name(a: dict[str, Any], b: dict[str, Any], name_a: str, name_b: str) -> bool:
    return str(a).replace(name_a, "X") == str(b).replace(name_b, "X")


def test_another_users_private_dataset_answers_like_an_unknown_one(client: TestClient) -> None:
    assert _push(client, BOB, "secret").status_code == 201
    hidden = client.get("/datasets/bob/secret/v1", headers=ALICE)
    unknown = client.get("/datasets/bob/absent/v1", headers=ALICE)
    assert hidden.status_code == unknown.status_code == 404
    assert _same_but_name(wire(hidden), wire(unknown), "secret", "absent")

    assert client.get("/datasets", headers=ALICE).json() == {"versions": []}
    listed = client.get("/datasets", params={"ref": "bob/secret"}, headers=ALICE)
    assert listed.json() == {"versions": []}

    flip = client.put("/datasets/bob/secret/visibility", json={"public": True}, headers=ALICE)
    flip_unknown = client.put(
        "/datasets/bob/absent/visibility", json={"public": True}, headers=ALICE
    )
    assert flip.status_code == flip_unknown.status_code == 404
    assert _same_but_name(wire(flip), wire(flip_unknown), "secret", "absent")

    rt = runtime(client)
    answers = []
    for name in ("secret", "absent"):
        ref = InputRef(kind=InputKind.DATASET, value="test.jsonl", dataset=f"bob/{name}")
        req = request(rt, inputs=Inputs(train_data=ref))
        resp = client.post("/jobs", json=req.model_dump(mode="json"), headers=ALICE)
        assert resp.status_code == 404
        answers.append(wire(resp))
    assert _same_but_name(answers[0], answers[1], "secret", "absent")
    assert client.get("/runs", headers=ALICE).json()["runs"] == []  # nothing was created


def test_a_public_dataset_is_readable_by_all_but_changed_by_its_owner_only(
    client: TestClient,
) -> None:
    assert _push(client, BOB, "shared", public=True).status_code == 201
    shown = client.get("/datasets/bob/shared/v1", headers=ALICE)
    assert shown.status_code == 200 and shown.json()["files"][0]["sha256"] == DIGEST
    flip = client.put("/datasets/bob/shared/visibility", json={"public": False}, headers=ALICE)
    assert flip.status_code == 403 and "only bob" in wire(flip)["message"]
    assert client.get("/datasets/bob/shared/v1", headers=ALICE).status_code == 200


@pytest.mark.parametrize(
    "path", ["../escape.jsonl", "/etc/passwd", "a/../../b.jsonl", "a\\..\\b", "ok/\x00.jsonl"]
)
def test_a_manifest_path_outside_the_dataset_is_refused_and_nothing_is_created(
    client: TestClient, path: str
) -> None:
    assert client.put(f"/blobs/{DIGEST}", content=DATA, headers=ALICE).status_code == 201
    files = [{"path": path, "sha256": DIGEST, "size": len(DATA)}]
    resp = client.post(
        "/datasets", json={"name": "evil", "version": "v1", "files": files}, headers=ALICE
    )
    assert 400 <= resp.status_code < 500
    assert wire(resp)["code"].startswith("usage")
    assert client.get("/datasets", headers=ALICE).json() == {"versions": []}


def test_a_link_in_a_pushed_manifest_is_refused(client: TestClient) -> None:
    assert client.put(f"/blobs/{DIGEST}", content=DATA, headers=ALICE).status_code == 201
    files = [
        {"path": "a.jsonl", "sha256": DIGEST, "size": len(DATA)},
        {"path": "b.jsonl", "sha256": DIGEST, "size": len(DATA), "symlink": "a.jsonl"},
    ]
    resp = client.post(
        "/datasets", json={"name": "linky", "version": "v1", "files": files}, headers=ALICE
    )
    assert resp.status_code == 400 and "plain files only" in wire(resp)["message"]
    assert client.get("/datasets", headers=ALICE).json() == {"versions": []}
