"""``--output-dataset``: admitted only as a new version of the submitter's own dataset; once the
run succeeds its ``FORGE_DATASET_OUT_DIR`` is published as that version, which a later run reads."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from starforge.contract.api import SubmitResponse
from starforge.contract.errors import DatasetVersionExists, Rejected, SensitiveFiles, UsageError
from starforge.contract.jobspec import InputKind, InputRef, Inputs
from starforge.contract.states import JobStatus
from starforge.server.runtime import Runtime
from starforge.server.services.data import blobs, datasets
from starforge.server.services.runs import jobs

from .factories import force, member, request
from .test_datasets import push


def submit_with_output(rt: Runtime, user: str, output: str) -> SubmitResponse:
    req = request(rt)
    req.spec = req.spec.model_copy(update={"output_dataset": output})
    for digest in req.manifest.digests():
        blobs.record(rt, user, digest)
    return jobs.submit(rt, user, req)


def succeed_with_files(rt: Runtime, run_id: str, files: dict[str, bytes]) -> None:
    force(rt, run_id, JobStatus.STARTING, JobStatus.RUNNING, JobStatus.SUCCEEDED)
    view = jobs.get(rt, member("alice"), run_id)
    out = rt.storage.root.joinpath(view.run_dir.removeprefix(str(rt.storage.root) + "/"))
    for rel, data in files.items():
        path = out / "out" / "dataset" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def test_a_succeeded_run_publishes_its_output_dir_and_another_run_reads_it(rt: Runtime) -> None:
    run_id = submit_with_output(rt, "alice", "alice/scored@v1").run_id
    assert datasets.publish_output(rt, run_id) is None  # not succeeded yet: nothing published
    succeed_with_files(rt, run_id, {"scored.jsonl": b'{"prompt": "a", "score": 1}\n'})
    done = datasets.publish_output(rt, run_id)
    assert done is not None and done.created and done.ref == "alice/scored@v1"
    view = datasets.show(rt, "alice", "alice/scored@v1")
    assert [(f.path, f.size) for f in view.files] == [("scored.jsonl", 28)]

    ref = InputRef(kind=InputKind.DATASET, value="scored.jsonl", dataset="alice/scored")
    req = request(rt, inputs=Inputs(train_data=ref))
    for digest in req.manifest.digests():
        blobs.record(rt, "alice", digest)
    later = jobs.submit(rt, "alice", req)
    assert jobs.get(rt, member("alice"), later.run_id).datasets == {"train_data": "alice/scored@v1"}


def test_an_output_version_that_exists_or_is_not_yours_is_refused_at_admission(
    rt: Runtime,
) -> None:
    push(rt, "alice", name="scored", version="v1")
    with pytest.raises(DatasetVersionExists, match="alice/scored@v1"):
        submit_with_output(rt, "alice", "alice/scored@v1")
    with pytest.raises(Rejected, match="only into your own datasets"):
        submit_with_output(rt, "alice", "bob/scored@v1")
    assert jobs.page(rt, member("alice")).runs == []


def test_an_output_with_a_secret_is_not_published(rt: Runtime) -> None:
    run_id = submit_with_output(rt, "alice", "alice/leak@v1").run_id
    succeed_with_files(rt, run_id, {"ok.jsonl": b"{}\n", ".env": b"HF_TOKEN=x\n"})
    with pytest.raises(SensitiveFiles):
        datasets.publish_output(rt, run_id)
    assert datasets.list_versions(rt, "alice").versions == []


def test_links_in_the_output_dir_are_never_followed_into_the_dataset(
    rt: Runtime, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "key.txt").write_bytes(b"not the run's\n")
    run_id = submit_with_output(rt, "alice", "alice/linked@v1").run_id
    succeed_with_files(rt, run_id, {"ok.jsonl": b"{}\n"})
    folder = Path(jobs.get(rt, member("alice"), run_id).run_dir) / "out" / "dataset"
    (folder / "stolen.txt").symlink_to(outside / "key.txt")
    (folder / "stolen-dir").symlink_to(outside)
    done = datasets.publish_output(rt, run_id)
    assert done is not None
    view = datasets.show(rt, "alice", "alice/linked@v1")
    assert [f.path for f in view.files] == ["ok.jsonl"]


def test_an_output_dir_that_is_a_link_publishes_nothing(rt: Runtime, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "key.txt").write_bytes(b"not the run's\n")
    run_id = submit_with_output(rt, "alice", "alice/linked@v1").run_id
    succeed_with_files(rt, run_id, {"ok.jsonl": b"{}\n"})
    folder = Path(jobs.get(rt, member("alice"), run_id).run_dir) / "out" / "dataset"
    shutil.rmtree(folder)
    folder.symlink_to(outside)
    with pytest.raises(UsageError, match="has no files"):
        datasets.publish_output(rt, run_id)
    assert datasets.list_versions(rt, "alice").versions == []
