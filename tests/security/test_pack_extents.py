"""A run's ``run.json`` tells the runner where packed blobs lie: a hostile entry must not make it
read outside the pack store, and a tampered pack fails the attempt as corrupt. A packed blob is
checked at admission like any other (the content check reads it from its pack)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from starforge.contract import blobbatch
from starforge.contract.errors import RunnerError
from starforge.contract.jobspec import FileEntry, Manifest
from starforge.contract.packs import Extent, read_extents
from starforge.runner.unpack import unpack
from tests.server.factories import request

from .conftest import ALICE, runtime

BATCH = {"Content-Type": blobbatch.MEDIA_TYPE}
CONTENT = {"train.py": b"print('the real trainer')\n", "notes.txt": b"neighbour bytes\n"}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _packed(client: TestClient) -> tuple[Path, Manifest, dict[str, Extent]]:
    """The package's blobs sent as one batch; its root, manifest and the server's extents."""
    body = blobbatch.encode((_sha(c), c) for c in CONTENT.values())
    assert client.post("/blobs/batch", content=body, headers={**ALICE, **BATCH}).status_code == 201
    storage = runtime(client).storage
    files = [FileEntry(path=p, sha256=_sha(c), size=len(c)) for p, c in CONTENT.items()]
    extents = storage.locate([f.sha256 for f in files])
    assert len(extents) == 2
    return storage.root, Manifest(files=files), extents


@pytest.mark.parametrize(
    "name",
    ["../../../etc/passwd", "/etc/passwd", "../" + "0" * 32 + ".pack", "x/" + "0" * 32 + ".pack"],
)
def test_a_pack_entry_naming_a_path_is_refused(name: str) -> None:
    with pytest.raises(RunnerError, match="not a pack in the store"):
        read_extents({_sha(b"x"): [name, 0, 1]})


@pytest.mark.parametrize("offset, size", [(-1, 4), (0, -4), ("0", 4), (True, 4), (0.5, 4)])
def test_a_pack_entry_with_a_bad_range_is_refused(offset: object, size: object) -> None:
    with pytest.raises(RunnerError, match="bad offset or size"):
        read_extents({_sha(b"x"): ["0" * 32 + ".pack", offset, size]})


def test_an_extent_past_the_end_of_its_pack_fails_the_attempt(
    client: TestClient, tmp_path: Path
) -> None:
    root, manifest, extents = _packed(client)
    digest = _sha(CONTENT["train.py"])
    pack = extents[digest].pack
    hostile = {**extents, digest: Extent(pack, 1 << 30, extents[digest].size)}
    wire = {d: e.wire() for d, e in hostile.items()}  # as run.json carries it
    with pytest.raises(RunnerError, match=f"blob {digest} is corrupt"):
        unpack(manifest, root, tmp_path / "work", read_extents(wire))
    assert not (tmp_path / "work").exists()


def test_an_extent_shifted_onto_a_neighbour_fails_the_attempt_as_corrupt(
    client: TestClient, tmp_path: Path
) -> None:
    root, manifest, extents = _packed(client)
    digest, other = _sha(CONTENT["train.py"]), _sha(CONTENT["notes.txt"])
    hostile = {**extents, digest: extents[other]}  # the neighbour's bytes under this name
    with pytest.raises(RunnerError, match=f"blob {digest} is corrupt.*resubmit the run"):
        unpack(manifest, root, tmp_path / "work", hostile)


def test_a_flipped_byte_in_a_pack_fails_the_attempt_as_corrupt(
    client: TestClient, tmp_path: Path
) -> None:
    root, manifest, extents = _packed(client)
    digest = _sha(CONTENT["train.py"])
    extent = extents[digest]
    pack = root / "blobs" / "packs" / extent.pack
    data = bytearray(pack.read_bytes())
    data[extent.offset] ^= 0x01
    pack.chmod(0o644)
    pack.write_bytes(bytes(data))
    with pytest.raises(RunnerError, match=f"blob {digest} is corrupt.*resubmit the run"):
        unpack(manifest, root, tmp_path / "work", extents)
    assert not (tmp_path / "work").exists()


def test_a_key_sent_in_a_batch_under_a_harmless_name_is_refused_by_its_content(
    client: TestClient,
) -> None:
    pem = b"-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----\n"
    body = blobbatch.encode([(_sha(pem), pem), (_sha(b"x = 1\n"), b"x = 1\n")])
    assert client.post("/blobs/batch", content=body, headers={**ALICE, **BATCH}).status_code == 201
    assert runtime(client).storage.locate([_sha(pem)])  # it lies in a pack, not in a file
    req = request(runtime(client))
    req.manifest.files.append(FileEntry(path="common/notes.txt", sha256=_sha(pem), size=len(pem)))
    resp = client.post("/jobs", json=req.model_dump(mode="json"), headers=ALICE)
    assert resp.status_code == 400, resp.text
    assert resp.json()["details"]["files"] == ["common/notes.txt"]
