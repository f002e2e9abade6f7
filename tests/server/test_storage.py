"""The blob store and the run directory layout."""

from __future__ import annotations

import hashlib
import json
import stat
from pathlib import Path

import pytest

from starforge.contract.errors import BlobDigestMismatch, InvalidName
from starforge.server.db.models import Run
from starforge.server.storage import Storage


def test_a_blob_lands_under_its_digest_split_two_and_sixty_two(tmp_path: Path) -> None:
    store = Storage(tmp_path)
    digest = store.put_bytes(b"hello")
    assert digest == hashlib.sha256(b"hello").hexdigest()
    assert store.path(digest) == tmp_path / "blobs" / "sha256" / digest[:2] / digest[2:]
    assert store.path(digest).read_bytes() == b"hello"
    assert store.has(digest)


def test_an_upload_that_does_not_hash_to_its_name_leaves_nothing(tmp_path: Path) -> None:
    store = Storage(tmp_path)
    digest = hashlib.sha256(b"expected").hexdigest()
    writer = store.blob_writer(digest)
    writer.write(b"something else")
    with pytest.raises(BlobDigestMismatch) as err:
        writer.commit()
    assert digest in err.value.message
    assert not store.has(digest)
    assert list(store.path(digest).parent.iterdir()) == []  # no temp file left behind


def test_a_failed_reupload_keeps_the_good_blob(tmp_path: Path) -> None:
    store = Storage(tmp_path)
    digest = store.put_bytes(b"good")
    writer = store.blob_writer(digest)
    writer.write(b"bad")
    with pytest.raises(BlobDigestMismatch):
        writer.commit()
    assert store.path(digest).read_bytes() == b"good"


def test_a_blob_arrives_in_chunks_and_is_hashed_while_streaming(tmp_path: Path) -> None:
    store = Storage(tmp_path)
    data = b"x" * 100_000
    writer = store.blob_writer(hashlib.sha256(data).hexdigest())
    for i in range(0, len(data), 4096):
        writer.write(data[i : i + 4096])
    assert writer.commit() == len(data)
    assert store.path(writer.digest).read_bytes() == data


def test_a_name_that_is_not_a_digest_is_refused(tmp_path: Path) -> None:
    store = Storage(tmp_path)
    with pytest.raises(InvalidName):
        store.path("../../etc/passwd")
    assert not store.has("abc")
    assert store.missing(["f" * 64, "f" * 64]) == ["f" * 64]


def test_run_dirs_logs_bindings_and_exit_records_follow_the_layout(tmp_path: Path) -> None:
    store = Storage(tmp_path)
    run_dir = store.run_dir("alice", "proj", "exp", "r-0123456789")
    assert run_dir == tmp_path / "runs" / "alice" / "proj" / "exp" / "r-0123456789"
    store.write_run_json(run_dir, {"a": 1}, {"files": []})
    assert {p.name for p in run_dir.iterdir()} == {"work", "out", "logs", "state"}
    assert json.loads((run_dir / "state" / "run.json").read_text()) == {
        "spec": {"a": 1},
        "manifest": {"files": []},
    }
    assert store.log_path(run_dir, 2).name == "attempt-2.log"
    assert store.log_path(run_dir, 2, 1).name == "attempt-2.node-1.log"
    assert store.binding_path(run_dir, 1, 0).name == "attempt-1.node-0.binding.json"
    assert store.exit_record_path(run_dir, 1, 3).name == "attempt-1.node-3.exit.json"


def test_a_runs_files_are_named_by_its_row(tmp_path: Path) -> None:
    run = Run(id="r-0123456789", user="alice", project="proj", experiment="exp")
    layout = Storage(tmp_path).layout_of(run)
    assert layout.dir == tmp_path / "runs" / "alice" / "proj" / "exp" / "r-0123456789"
    assert layout.out == layout.dir / "out"
    with pytest.raises(InvalidName):
        Storage(tmp_path).layout_of(
            Run(id="r-0123456789", user="alice", project="..", experiment="e")
        )


def test_a_run_dir_name_cannot_escape_the_root(tmp_path: Path) -> None:
    with pytest.raises(InvalidName):
        Storage(tmp_path).run_dir("alice", "..", "exp", "r-0123456789")


def test_a_binding_file_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "state" / "b.json"
    Storage(tmp_path).write_binding(path, {"run_token": "secret"})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {"run_token": "secret"}


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, None),
        ("{not json", None),
        ('{"exit_code": "0"}', None),
        (
            '{"exit_code": 0, "end_reason": "completed"}',
            {"exit_code": 0, "end_reason": "completed"},
        ),
    ],
)
def test_an_exit_record_counts_only_when_whole_and_well_formed(
    tmp_path: Path, content: str | None, expected: dict[str, object] | None
) -> None:
    path = tmp_path / "exit.json"
    if content is not None:
        path.write_text(content)
    assert Storage.read_exit_record(path) == expected
