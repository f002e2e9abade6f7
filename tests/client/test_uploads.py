"""Uploading a package: small files in batches, big ones one each, older servers still served."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx
import pytest

from starforge.client import uploads
from starforge.contract import blobbatch
from starforge.contract.errors import BlobDigestMismatch
from starforge.contract.jobspec import FileEntry

from .conftest import Counting, alice


def _package(root: Path, small: int, big_bytes: int) -> list[FileEntry]:
    files = {f"f{i:04d}.txt": f"line {i}\n".encode() for i in range(small)}
    files["big.bin"] = b"z" * big_bytes
    entries = []
    for name, data in files.items():
        (root / name).write_bytes(data)
        digest = hashlib.sha256(data).hexdigest()
        entries.append(FileEntry(path=name, sha256=digest, size=len(data)))
    return entries


def test_small_files_go_in_one_batch_and_a_big_one_alone(
    app_transport: httpx.BaseTransport, tmp_path: Path
) -> None:
    entries = _package(tmp_path, 300, blobbatch.SMALL_BLOB_BYTES + 1)
    counting = Counting(app_transport)
    sent: list[int] = []
    with alice(counting) as client:
        uploads.upload_files(client, tmp_path, entries, sent.append)
        assert client.missing_blobs([e.sha256 for e in entries]) == []
    assert counting.calls["POST batch"] == 1
    assert counting.calls["PUT " + entries[-1].sha256[:5]] == 1
    assert sum(sent) == sum(e.size for e in entries)


def test_an_older_server_gets_one_request_per_file(
    app_transport: httpx.BaseTransport, tmp_path: Path
) -> None:
    entries = _package(tmp_path, 20, 10)
    counting = Counting(app_transport, refuse_batches=True)
    with alice(counting) as client:
        uploads.upload_files(client, tmp_path, entries)
        assert client.missing_blobs([e.sha256 for e in entries]) == []
    assert counting.calls["POST batch"] == 1  # tried once, then never again
    assert sum(n for k, n in counting.calls.items() if k.startswith("PUT")) == 21


def test_many_small_files_go_in_several_batches_and_all_arrive(
    app_transport: httpx.BaseTransport, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(uploads, "BATCH_FILES", 7)  # a small package still needs many batches
    entries = _package(tmp_path, 40, 10)
    counting = Counting(app_transport)
    sent: list[int] = []
    with alice(counting) as client:
        uploads.upload_files(client, tmp_path, entries, sent.append)
        assert client.missing_blobs([e.sha256 for e in entries]) == []
    assert counting.calls["POST batch"] == 6  # 41 files, 7 to a batch
    assert sum(sent) == sum(e.size for e in entries)


def test_a_file_changed_since_it_was_hashed_fails_the_upload_in_a_later_batch(
    app_transport: httpx.BaseTransport, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(uploads, "BATCH_FILES", 5)
    entries = _package(tmp_path, 30, 10)
    changed = entries[22]  # in the fifth batch: sent while others are in flight
    (tmp_path / changed.path).write_bytes(b"edited after packing\n")
    with alice(Counting(app_transport)) as client:
        with pytest.raises(BlobDigestMismatch):
            uploads.upload_files(client, tmp_path, entries)
        lacking = set(client.missing_blobs([e.sha256 for e in entries]))
    assert changed.sha256 in lacking  # nothing of its batch was kept
    assert entries[0].sha256 not in lacking  # the first batch was stored before


def test_a_kept_content_is_sent_as_it_was_hashed_not_as_the_file_is_now(
    app_transport: httpx.BaseTransport, tmp_path: Path
) -> None:
    entries = _package(tmp_path, 3, 10)
    kept = {e.sha256: (tmp_path / e.path).read_bytes() for e in entries}
    for entry in entries:  # edited after packing: the manifest still names the old contents
        (tmp_path / entry.path).write_bytes(b"edited\n")
    with alice(Counting(app_transport)) as client:
        uploads.upload_files(client, tmp_path, entries, None, kept)
        assert client.missing_blobs([e.sha256 for e in entries]) == []


def test_a_kept_empty_file_is_sent_empty_even_when_the_file_has_changed(
    app_transport: httpx.BaseTransport, tmp_path: Path
) -> None:
    empty = hashlib.sha256(b"").hexdigest()
    (tmp_path / "empty.txt").write_bytes(b"written after packing\n")
    entries = [FileEntry(path="empty.txt", sha256=empty, size=0)]
    with alice(Counting(app_transport)) as client:
        uploads.upload_files(client, tmp_path, entries, None, {empty: b""})
        assert client.missing_blobs([empty]) == []


def test_a_batch_body_frames_each_blob_as_the_server_parses_it() -> None:
    blobs = [(hashlib.sha256(b).hexdigest(), b) for b in (b"", b"a", b"x" * 5000, b"\x00" * 3)]
    body = blobbatch.encode(iter(blobs))
    assert body == b"".join(blobbatch.frame(d, b) for d, b in blobs)
    assert [(d, bytes(v)) for d, v in blobbatch.parse(body)] == blobs
