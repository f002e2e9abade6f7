"""Attacks on blob uploads: wrong content, too much content, no token, a killed upload's temp."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from starforge.contract.errors import BodyTooLarge
from starforge.server.settings import Settings
from starforge.server.storage import Storage

from .conftest import ALICE, LIMIT, client_for, wire


def _leftovers(root: Path) -> list[Path]:
    """Every file under the blob store: blobs and temporary uploads alike."""
    store = root / "blobs"
    return sorted(p for p in store.rglob("*") if p.is_file()) if store.exists() else []


def test_content_that_does_not_hash_to_its_name_is_400_and_leaves_nothing(
    client: TestClient, settings: Settings
) -> None:
    named = hashlib.sha256(b"what was promised").hexdigest()
    resp = client.put(f"/blobs/{named}", content=b"something else", headers=ALICE)
    assert resp.status_code == 400 and wire(resp)["code"] == "blobs.digest_mismatch"
    assert _leftovers(settings.storage) == []
    assert client.post("/blobs/missing", json={"digests": [named]}, headers=ALICE).json() == {
        "missing": [named]
    }


def test_an_upload_over_the_blob_limit_is_413_and_leaves_nothing(
    client: TestClient, settings: Settings
) -> None:
    data = os.urandom(LIMIT + 1)
    digest = hashlib.sha256(data).hexdigest()
    declared = client.put(f"/blobs/{digest}", content=data, headers=ALICE)
    assert declared.status_code == 413 and wire(declared)["code"] == "request.too_large"
    streamed = client.put(
        f"/blobs/{digest}",
        content=iter([data[i : i + 8192] for i in range(0, len(data), 8192)]),
        headers=ALICE,
    )
    assert streamed.status_code == 413 and wire(streamed)["code"] == "request.too_large"
    assert _leftovers(settings.storage) == []


def test_the_store_cuts_an_upload_at_its_limit_whoever_calls_it(tmp_path: Path) -> None:
    store = Storage(tmp_path)
    writer = store.blob_writer("0" * 64, max_bytes=10)
    writer.write(b"x" * 10)
    with pytest.raises(BodyTooLarge):
        writer.write(b"x")
    assert _leftovers(tmp_path) == []


def test_an_upload_without_a_token_is_401_and_leaves_nothing(
    client: TestClient, settings: Settings
) -> None:
    data = b"payload"
    resp = client.put(f"/blobs/{hashlib.sha256(data).hexdigest()}", content=data)
    assert resp.status_code == 401 and wire(resp)["code"] == "auth.unauthorized"
    assert _leftovers(settings.storage) == []


def test_a_temp_left_by_a_killed_upload_is_removed_at_start(settings: Settings) -> None:
    shard = settings.storage / "blobs" / "sha256" / "ab"
    shard.mkdir(parents=True)
    killed = shard / ".upload.k1ll3d.tmp"
    killed.write_bytes(b"x" * 4096)
    long_ago = time.time() - settings.stale_upload_s - 60
    os.utime(killed, (long_ago, long_ago))
    # One still being written (by another server sharing the store) is not touched.
    in_flight = shard / ".upload.fl1ght.tmp"
    in_flight.write_bytes(b"x")
    with client_for(settings):
        assert not killed.exists()
        assert in_flight.exists()
