"""Attacks on batched blob uploads: a wrong blob, too big a body, no token, a cut frame."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from fastapi.testclient import TestClient

from starforge.contract import blobbatch
from starforge.server.settings import Settings

from .conftest import ALICE, BOB, LIMIT, runtime, wire

BATCH = {"Content-Type": blobbatch.MEDIA_TYPE}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _leftovers(root: Path) -> list[Path]:
    store = root / "blobs"
    return sorted(p for p in store.rglob("*") if p.is_file()) if store.exists() else []


def _missing(client: TestClient, digests: list[str], who: dict[str, str]) -> list[str]:
    resp = client.post("/blobs/missing", json={"digests": digests}, headers=who)
    return list(resp.json()["missing"])


def test_a_batch_stores_every_blob_for_its_uploader_only(
    client: TestClient, settings: Settings
) -> None:
    blobs = [f"file {i}\n".encode() for i in range(50)]
    digests = [_sha(b) for b in blobs]
    body = blobbatch.encode(zip(digests, blobs, strict=True))
    resp = client.post("/blobs/batch", content=body, headers={**ALICE, **BATCH})
    assert resp.status_code == 201 and resp.json() == {"blobs": 50, "size": sum(map(len, blobs))}
    assert _missing(client, digests, ALICE) == []
    assert _missing(client, digests, BOB) == sorted(digests)  # bob never sent them
    assert [p.parent.name for p in _leftovers(settings.storage)] == ["packs"]  # one pack file
    assert runtime(client).storage.read_blob(digests[0]) == blobs[0]


def test_a_batch_with_one_wrong_blob_is_refused_and_keeps_nothing(
    client: TestClient, settings: Settings
) -> None:
    good = b"good content"
    lie = _sha(b"what was promised")
    body = blobbatch.encode([(_sha(good), good), (lie, b"something else")])
    resp = client.post("/blobs/batch", content=body, headers={**ALICE, **BATCH})
    assert resp.status_code == 400 and wire(resp)["code"] == "blobs.digest_mismatch"
    assert _leftovers(settings.storage) == []
    assert _missing(client, [_sha(good), lie], ALICE) == sorted([_sha(good), lie])


def test_a_batch_over_the_body_limit_is_413_and_keeps_nothing(
    client: TestClient, settings: Settings
) -> None:
    blobs = [bytes([i]) * 1024 for i in range(LIMIT // 1024 + 1)]
    body = blobbatch.encode((_sha(b), b) for b in blobs)
    declared = client.post("/blobs/batch", content=body, headers={**ALICE, **BATCH})
    assert declared.status_code == 413 and wire(declared)["code"] == "request.too_large"
    streamed = client.post(
        "/blobs/batch",
        content=iter([body[i : i + 8192] for i in range(0, len(body), 8192)]),
        headers={**ALICE, **BATCH},
    )
    assert streamed.status_code == 413 and wire(streamed)["code"] == "request.too_large"
    assert _leftovers(settings.storage) == []


def test_a_batch_without_a_token_is_401_and_keeps_nothing(
    client: TestClient, settings: Settings
) -> None:
    data = b"payload"
    resp = client.post("/blobs/batch", content=blobbatch.encode([(_sha(data), data)]))
    assert resp.status_code == 401 and wire(resp)["code"] == "auth.unauthorized"
    assert _leftovers(settings.storage) == []


def test_a_cut_or_malformed_batch_is_400_and_keeps_nothing(
    client: TestClient, settings: Settings
) -> None:
    data = b"payload"
    whole = blobbatch.encode([(_sha(data), data), (_sha(b"x"), b"x")])
    for body in (whole[:-1], whole[:70], b"not a digest" * 10):
        resp = client.post("/blobs/batch", content=body, headers={**ALICE, **BATCH})
        assert resp.status_code == 400 and wire(resp)["code"] == "usage", body[:20]
    assert _leftovers(settings.storage) == []


def test_batched_blobs_are_readable_by_the_runners_whatever_the_umask(
    client: TestClient, settings: Settings
) -> None:
    blobs = [b"first\n", b"second\n"]
    body = blobbatch.encode((_sha(b), b) for b in blobs)
    old = os.umask(0o077)  # a server started by a careful admin: new files private
    try:
        resp = client.post("/blobs/batch", content=body, headers={**ALICE, **BATCH})
    finally:
        os.umask(old)
    assert resp.status_code == 201
    stored = _leftovers(settings.storage)
    assert stored and all(stat.S_IMODE(p.stat().st_mode) == 0o644 for p in stored)
