"""Platform datasets on the control plane: push, immutability, listing, and admission's
resolution of a run's dataset inputs (latest version, the file in it, the version recorded)."""

from __future__ import annotations

import pytest

from starforge.contract.datasets import DatasetPush, resolved_of
from starforge.contract.errors import (
    DatasetNotFound,
    DatasetVersionExists,
    MissingBlobs,
    Rejected,
    SensitiveFiles,
    UsageError,
)
from starforge.contract.jobspec import FileEntry, InputKind, InputRef, Inputs
from starforge.server.runtime import Runtime
from starforge.server.services.data import blobs, datasets
from starforge.server.services.runs import jobs

from .factories import member, run_row, submit

PROMPTS = {"train.jsonl": b'{"prompt": "a"}\n', "val.jsonl": b'{"prompt": "b"}\n'}


def files_of(rt: Runtime, user: str, files: dict[str, bytes], *, upload: bool = True) -> list:
    entries = []
    for path, data in sorted(files.items()):
        digest = rt.storage.put_bytes(data)
        if upload:
            blobs.record(rt, user, digest)
        entries.append(FileEntry(path=path, sha256=digest, size=len(data)))
    return entries


def push(
    rt: Runtime,
    user: str,
    name: str = "prompts",
    version: str = "v1",
    files: dict[str, bytes] | None = None,
    **extra: object,
) -> datasets.DatasetPushResult:
    entries = files_of(rt, user, files or PROMPTS)
    return datasets.push(rt, user, DatasetPush(name=name, version=version, files=entries, **extra))


def test_a_pushed_version_shows_its_files_and_card_to_its_owner(rt: Runtime) -> None:
    result = push(rt, "alice", readme="tiny prompts\n")
    assert result.created and result.ref == "alice/prompts@v1"
    view = datasets.show(rt, "alice", "alice/prompts@v1")
    assert [(f.path, f.size) for f in view.files] == [("train.jsonl", 16), ("val.jsonl", 16)]
    assert view.readme == "tiny prompts\n" and not view.public
    assert view.file_count == 2 and view.total_bytes == 32
    # The canonical manifest is in the blob store, named by what a run records.
    assert rt.storage.has(view.manifest_sha256)


def test_the_same_push_again_changes_nothing_and_other_files_are_refused(rt: Runtime) -> None:
    push(rt, "alice")
    again = push(rt, "alice")
    assert not again.created and again.ref == "alice/prompts@v1"
    with pytest.raises(DatasetVersionExists, match="alice/prompts@v1 exists with other files"):
        push(rt, "alice", files={"train.jsonl": b"changed\n"})
    view = datasets.show(rt, "alice", "alice/prompts@v1")
    assert [f.path for f in view.files] == ["train.jsonl", "val.jsonl"]


def test_a_push_needs_blobs_the_owner_uploaded(rt: Runtime) -> None:
    entries = files_of(rt, "bob", {"x.jsonl": b"bob's\n"})  # bob sent it, alice did not
    with pytest.raises(MissingBlobs):
        datasets.push(rt, "alice", DatasetPush(name="d", version="v1", files=entries))
    assert datasets.list_versions(rt, "alice").versions == []


def test_an_empty_or_secret_holding_dataset_is_refused(rt: Runtime) -> None:
    with pytest.raises(UsageError, match="has no files"):
        datasets.push(rt, "alice", DatasetPush(name="d", version="v1", files=[]))
    with pytest.raises(SensitiveFiles, match=r"\.env"):
        push(rt, "alice", name="d", files={".env": b"X=1\n", "a.jsonl": b"{}\n"})
    key = b"-----BEGIN RSA PRIVATE KEY-----\nabc\n"
    with pytest.raises(SensitiveFiles, match=r"notes\.txt"):
        push(rt, "alice", name="d", files={"notes.txt": key})
    assert datasets.list_versions(rt, "alice").versions == []


def test_ls_lists_own_and_public_versions_newest_first(rt: Runtime) -> None:
    push(rt, "alice", version="v1")
    push(rt, "alice", version="v2", files={"train.jsonl": b"v2\n"})
    push(rt, "bob", name="secret")
    push(rt, "bob", name="shared", public=True)
    refs = [v.ref for v in datasets.list_versions(rt, "alice").versions]
    assert refs == ["bob/shared@v1", "alice/prompts@v2", "alice/prompts@v1"]
    only = [v.ref for v in datasets.list_versions(rt, "alice", "prompts").versions]
    assert only == ["alice/prompts@v2", "alice/prompts@v1"]
    datasets.set_visibility(rt, "bob", "bob", "secret", True)
    assert "bob/secret@v1" in [v.ref for v in datasets.list_versions(rt, "alice").versions]


def _dataset_inputs(ref: str, train: str = "train.jsonl") -> Inputs:
    return Inputs(train_data=InputRef(kind=InputKind.DATASET, value=train, dataset=ref))


def test_admission_resolves_the_latest_version_and_the_run_records_it(rt: Runtime) -> None:
    push(rt, "alice", version="v1")
    push(rt, "alice", version="v2", files={"train.jsonl": b"v2\n"})
    resp = submit(rt, "alice", inputs=_dataset_inputs("alice/prompts"))
    view = jobs.get(rt, member("alice"), resp.run_id)
    assert view.datasets == {"train_data": "alice/prompts@v2"}
    recorded = resolved_of(run_row(rt, resp.run_id).config)["train_data"]
    assert (recorded.version, recorded.path) == ("v2", "train.jsonl")
    pinned = submit(rt, "alice", inputs=_dataset_inputs("alice/prompts@v1", "val.jsonl"))
    assert jobs.get(rt, member("alice"), pinned.run_id).datasets == {
        "train_data": "alice/prompts@v1"
    }


def test_a_file_not_in_the_dataset_is_refused_with_the_closest_names(rt: Runtime) -> None:
    push(rt, "alice")
    with pytest.raises(Rejected, match="no such file in dataset alice/prompts@v1") as err:
        submit(rt, "alice", inputs=_dataset_inputs("alice/prompts@v1", "trian.jsonl"))
    assert err.value.details["closest"][0] == "train.jsonl"
    assert err.value.exit_code == 2
    for outside in ("../train.jsonl", "/etc/passwd", "./train.jsonl"):
        with pytest.raises(Rejected, match="relative path"):
            submit(rt, "alice", inputs=_dataset_inputs("alice/prompts@v1", outside))


def test_an_unknown_dataset_or_version_is_refused_at_admission(rt: Runtime) -> None:
    push(rt, "alice")
    for ref in ("alice/nope", "alice/prompts@v9", "carol/prompts"):
        with pytest.raises(DatasetNotFound, match=ref) as err:
            submit(rt, "alice", inputs=_dataset_inputs(ref))
        assert err.value.exit_code == 2
    with pytest.raises(UsageError, match="not a dataset reference"):
        submit(rt, "alice", inputs=_dataset_inputs("no-owner@v1"))
