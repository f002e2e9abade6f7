"""Another user's blob, named by its digest, through a real server on 127.0.0.1: every route that
takes a manifest (a job, a sweep, a dataset version) checks that each blob is the caller's before
any is read, so the refusal says nothing about the content (the sensitive-content check would
have quoted "content: an AWS access key" of alice's file to bob).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from starforge.contract.api import API_PREFIX
from starforge.contract.jobspec import FileEntry, Manifest
from tests.server.factories import TOKENS, spec

from .conftest import Live

ALICE = {"Authorization": f"Bearer {TOKENS['alice']}"}
BOB = {"Authorization": f"Bearer {TOKENS['bob']}"}
# alice's file: a (made-up) AWS access key, which the content check recognises.
ALICES = b"aws_access_key_id = AKIAQWERTYUIOPASDFGH\nnotes of alice " + uuid.uuid4().hex.encode()
DIGEST = hashlib.sha256(ALICES).hexdigest()
# Words that would tell bob something about what alice's blob holds.
TELLTALE = ("aws", "access key", "content", "sensitive", "akia", "notes.txt is")


@pytest.fixture
def http(live: Live) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live.url + API_PREFIX, timeout=60) as client:
        resp = client.put(f"/blobs/{DIGEST}", content=ALICES, headers=ALICE)
        assert resp.status_code == 201, resp.text
        yield client


def _manifest(http: httpx.Client, who: dict[str, str]) -> Manifest:
    """``who``'s own entrypoint, plus alice's file under a harmless name."""
    train = b"#!/usr/bin/env bash\necho hello " + uuid.uuid4().hex.encode() + b"\n"
    own = hashlib.sha256(train).hexdigest()
    assert http.put(f"/blobs/{own}", content=train, headers=who).status_code == 201
    return Manifest(
        files=[
            FileEntry(path="experiments/exp/notes.txt", sha256=DIGEST, size=len(ALICES)),
            FileEntry(path="experiments/exp/train.sh", sha256=own, size=len(train)),
        ]
    )


def _job(manifest: Manifest) -> dict[str, Any]:
    return {
        "spec": spec(profiles=["h200:1"]).model_dump(mode="json"),
        "manifest": manifest.model_dump(mode="json"),
        "idempotency_key": uuid.uuid4().hex,
    }


def _refused_without_content(resp: httpx.Response) -> None:
    assert resp.status_code == 422, resp.text
    body = resp.json()
    assert body["code"] == "admission.missing_blobs", body
    assert body["details"]["missing"] == [DIGEST]
    said = resp.text.lower()
    assert not [w for w in TELLTALE if w in said], said


def test_a_job_naming_another_users_digest_is_refused_before_it_is_read(
    http: httpx.Client,
) -> None:
    body = _job(_manifest(http, BOB))
    _refused_without_content(http.post("/jobs", json=body, headers=BOB))
    assert http.get("/runs", headers=BOB).json()["runs"] == []
    # The same package from alice, whose blob it is: now it is read, and refused for its content.
    mine = http.post("/jobs", json=_job(_manifest(http, ALICE)), headers=ALICE)
    assert mine.status_code == 400 and mine.json()["code"] == "project.sensitive_files"
    assert "an AWS access key" in mine.json()["message"]


def test_a_sweep_naming_another_users_digest_is_refused_before_it_is_read(
    http: httpx.Client,
) -> None:
    body = _job(_manifest(http, BOB)) | {"variants": [{"lr": 0.1}, {"lr": 0.2}]}
    _refused_without_content(http.post("/sweeps", json=body, headers=BOB))
    assert http.get("/runs", headers=BOB).json()["runs"] == []


def test_a_dataset_naming_another_users_digest_is_refused_before_it_is_read(
    http: httpx.Client,
) -> None:
    files = [FileEntry(path="notes.txt", sha256=DIGEST, size=len(ALICES)).model_dump()]
    body = {"name": "stolen", "version": "v1", "files": files}
    _refused_without_content(http.post("/datasets", json=body, headers=BOB))
    versions = http.get("/datasets", headers=BOB).json()["versions"]
    assert [v for v in versions if v["name"] == "stolen"] == []
