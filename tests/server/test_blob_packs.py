"""Batched blobs are stored in one pack file per batch, and read back exactly, by the server
and, through the run's ``run.json``, by the runner."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from sqlalchemy import func, select

from starforge.contract import blobbatch
from starforge.contract.datasets import RESOLVED_KEY, Resolved, manifest_bytes
from starforge.contract.errors import BlobDigestMismatch
from starforge.contract.jobspec import FileEntry, Manifest
from starforge.contract.packs import read_extents
from starforge.runner import datasets
from starforge.runner.unpack import unpack
from starforge.server.db.packs import BlobPack
from starforge.server.runtime import Runtime
from starforge.server.services.data import blobs


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _files(root: Path, folder: str) -> list[Path]:
    where = root / "blobs" / folder
    return sorted(p for p in where.rglob("*") if p.is_file()) if where.exists() else []


def _store(rt: Runtime, contents: list[bytes], user: str = "alice") -> list[str]:
    digests = [_sha(c) for c in contents]
    blobs.store_batch(rt, user, blobbatch.encode(zip(digests, contents, strict=True)))
    return digests


def test_a_batch_is_stored_as_one_pack_file_and_none_of_its_blobs_is_missing(rt: Runtime) -> None:
    contents = [f"file {i}\n".encode() * 40 for i in range(300)]
    digests = _store(rt, contents)
    root = rt.storage.root
    assert len(_files(root, "packs")) == 1
    assert _files(root, "sha256") == []  # no file per blob
    assert blobs.missing(rt, "alice", digests) == []
    assert blobs.missing(rt, "bob", digests) == sorted(digests)  # bob never sent them


def test_a_batch_whose_last_blob_mismatches_keeps_and_records_nothing(rt: Runtime) -> None:
    good = [f"good {i}".encode() for i in range(20)]
    frames = [(_sha(g), g) for g in good] + [(_sha(b"promised"), b"something else")]
    with pytest.raises(BlobDigestMismatch):
        blobs.store_batch(rt, "alice", blobbatch.encode(frames))
    assert _files(rt.storage.root, "packs") == [] and _files(rt.storage.root, "sha256") == []
    assert blobs.missing(rt, "alice", [d for d, _ in frames]) == sorted(d for d, _ in frames)
    with rt.reading() as session:
        assert session.scalar(select(func.count()).select_from(BlobPack)) == 0


def test_a_packed_blob_reads_back_exactly_its_bytes_and_not_its_neighbours(rt: Runtime) -> None:
    contents = [b"a" * 10, b"", b"middle blob\n" * 3, b"z" * 5000]
    for digest, data in zip(_store(rt, contents), contents, strict=True):
        with rt.storage.open_blob(digest) as fh:
            assert fh.read(1 << 20) == data
            assert fh.read(1 << 20) == b""
        assert rt.storage.read_blob(digest) == data
        assert rt.storage.head(digest, 4) == data[:4]
    assert rt.storage.head(_sha(b"never stored"), 4) is None
    digests = [_sha(c) for c in contents]
    loose = rt.storage.put_bytes(b"a file of its own")
    heads = rt.storage.heads([*digests, loose, _sha(b"never stored")], 4)
    assert heads == {**{_sha(c): c[:4] for c in contents}, loose: b"a fi"}


def test_a_blob_stored_already_is_not_packed_again(rt: Runtime) -> None:
    first = _store(rt, [b"one", b"two"])
    _store(rt, [b"two", b"three", b"one"], user="bob")
    packs = _files(rt.storage.root, "packs")
    assert sorted(p.stat().st_size for p in packs) == [len(b"three"), len(b"onetwo")]
    assert blobs.missing(rt, "bob", first) == []  # bob proved he has them: now his too


def test_the_runner_unpacks_a_package_of_packed_blobs_from_what_run_json_says(
    rt: Runtime, tmp_path: Path
) -> None:
    contents = {"train.py": b"print('hi')\n", "data/a.txt": b"alpha\n", "data/b.txt": b"beta\n"}
    _store(rt, list(contents.values()))
    loose = rt.storage.put_bytes(b"a file of its own\n")  # a streamed upload: not packed
    files = [FileEntry(path=p, sha256=_sha(c), size=len(c)) for p, c in contents.items()]
    files.append(FileEntry(path="big.bin", sha256=loose, size=18))
    manifest = Manifest(files=files)
    run_dir = tmp_path / "run"
    rt.storage.write_run_json(run_dir, {}, manifest.model_dump(mode="json"))
    written = json.loads(rt.storage.run_json_path(run_dir).read_text())
    assert sorted(written["packs"]) == sorted(_sha(c) for c in contents.values())
    work = run_dir / "work"
    assert unpack(manifest, rt.storage.root, work, read_extents(written["packs"])) == 4
    for path, data in contents.items():
        assert (work / path).read_bytes() == data
    assert (work / "big.bin").read_bytes() == b"a file of its own\n"


def test_the_blobs_of_a_lost_pack_file_are_missing_again(rt: Runtime) -> None:
    digests = _store(rt, [b"kept only in the pack", b"and its neighbour"])
    (pack,) = _files(rt.storage.root, "packs")
    pack.unlink()
    assert blobs.missing(rt, "alice", digests) == sorted(digests)  # so the client sends them again
    _store(rt, [b"kept only in the pack", b"and its neighbour"])
    assert blobs.missing(rt, "alice", digests) == []
    assert rt.storage.read_blob(digests[0]) == b"kept only in the pack"


def test_the_runner_fetches_a_dataset_of_packed_files_from_what_run_json_says(
    rt: Runtime, tmp_path: Path
) -> None:
    files = {"train.jsonl": b'{"prompt": "a"}\n' * 50, "val.jsonl": b'{"prompt": "b"}\n'}
    _store(rt, list(files.values()))
    entries = [FileEntry(path=p, sha256=_sha(d), size=len(d)) for p, d in files.items()]
    manifest = rt.storage.put_bytes(manifest_bytes(entries))  # as a dataset push stores it
    r = Resolved(owner="alice", name="ds", version="v1", path=".", manifest_sha256=manifest)
    run_dir = tmp_path / "run"
    config = {RESOLVED_KEY: {"dataset": r.model_dump(mode="json")}}
    rt.storage.write_run_json(run_dir, {}, Manifest(files=[]).model_dump(mode="json"), config)
    written = json.loads(rt.storage.run_json_path(run_dir).read_text())
    assert sorted(written["packs"]) == sorted(_sha(d) for d in files.values())
    folder, fetched = datasets.ensure(rt.storage.root, r, packs=read_extents(written["packs"]))
    assert fetched and {p: (folder / p).read_bytes() for p in files} == files
