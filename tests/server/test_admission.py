"""Admission: each rejection names what was wrong and creates nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select

from starforge.contract.api import SubmitRequest
from starforge.contract.errors import (
    CatalogMismatch,
    MethodNotFound,
    MissingBlobs,
    MissingEntrypoint,
    MissingInput,
    ProfileError,
    Rejected,
    StarForgeError,
)
from starforge.contract.jobspec import (
    FileEntry,
    InputKind,
    InputRef,
    Inputs,
    Manifest,
    ParamBinding,
)
from starforge.contract.states import JobStatus
from starforge.server.db.models import Run
from starforge.server.runtime import Runtime
from starforge.server.services import jobs

from .factories import package, request, spec


def rejected(rt: Runtime, req: SubmitRequest, kind: type[StarForgeError]) -> StarForgeError:
    with pytest.raises(kind) as err:
        jobs.submit(rt, "alice", req)
    with rt.transaction() as session:
        assert session.scalar(select(func.count()).select_from(Run)) == 0
    assert not (rt.storage.root / "runs").exists()
    return err.value


def test_a_valid_submission_is_queued_with_its_files_in_place(rt: Runtime) -> None:
    resp = jobs.submit(rt, "alice", request(rt))
    assert resp.created and resp.status is JobStatus.QUEUED and resp.queue_position == 1
    run_json = rt.storage.root / "runs/alice/proj/exp" / resp.run_id / "state/run.json"
    assert run_json.is_file()


def test_a_stale_lock_whose_bound_parameter_vanished_is_refused_naming_both_versions(
    rt: Runtime,
) -> None:
    gone = {"old_knob": ParamBinding(path="trainer.old_knob", type="int")}
    req = request(rt, version="0.9.0", digest="sha256:" + "0" * 64, bindings=gone)
    err = rejected(rt, req, CatalogMismatch)
    assert "stale lock" in err.message
    assert "0.9.0" in err.message and "1.0.0" in err.message
    assert "'old_knob' was removed" in err.message
    assert "--upgrade-recipe" in (err.hint or "")


def test_a_lock_on_a_removed_framework_version_is_refused(rt: Runtime) -> None:
    err = rejected(rt, request(rt, framework_version="0.0.1"), CatalogMismatch)
    assert "framework version 0.0.1 was removed" in err.message


def test_a_drifted_lock_is_admitted_with_a_warning(rt: Runtime) -> None:
    resp = jobs.submit(rt, "alice", request(rt, version="0.9.0", digest="sha256:" + "1" * 64))
    assert resp.created
    assert any("method lock" in w and "0.9.0" in w for w in resp.warnings)


def test_an_unknown_method_is_refused(rt: Runtime) -> None:
    req = SubmitRequest(
        spec=spec().model_copy(
            update={"method": spec().method.model_copy(update={"id": "trl/grpoo"})}
        ),
        manifest=package(rt),
        idempotency_key="k" * 16,
    )
    err = rejected(rt, req, MethodNotFound)
    assert "trl/grpo" in (err.hint or "")


@pytest.mark.parametrize(
    ("profiles", "needle"),
    [
        (["b200:8"], "unknown profile 'b200'"),
        (["h200:12"], "whole multiple of 8"),
        (["h200:x"], "must be a positive whole number"),
    ],
)
def test_a_bad_profile_is_a_usage_error(rt: Runtime, profiles: list[str], needle: str) -> None:
    err = rejected(rt, request(rt, profiles=profiles), ProfileError)
    assert needle in err.message


def test_more_nodes_than_the_cluster_has_is_rejected_with_the_numbers(rt: Runtime) -> None:
    err = rejected(rt, request(rt, profiles=["h200:24"]), Rejected)
    assert "needs 3 nodes with 8 h200 GPUs each but the cluster has 2" in err.message


def test_more_gpus_per_node_than_a_node_has_is_rejected(rt: Runtime) -> None:
    err = rejected(rt, request(rt, profiles=["h200x16"]), Rejected)
    assert "needs 16 GPUs per node but the largest h200 node has 8" in err.message


def test_a_series_the_cluster_lacks_is_rejected(rt: Runtime) -> None:
    err = rejected(rt, request(rt, profiles=["a100:1"]), Rejected)
    assert "needs a100 GPUs but no node of this cluster has them" in err.message


def test_a_run_that_only_waits_for_capacity_is_admitted(rt: Runtime) -> None:
    jobs.submit(rt, "alice", request(rt, profiles=["h200:16"]))
    second = jobs.submit(rt, "alice", request(rt, profiles=["h200:16"]))
    assert second.status is JobStatus.QUEUED and second.queue_position == 2


def test_missing_required_inputs_are_named_by_their_flags(rt: Runtime) -> None:
    inputs = Inputs(model=InputRef(kind=InputKind.HUB, value="Qwen/Qwen3-0.6B"))
    err = rejected(rt, request(rt, method_id="trl/grpo", inputs=inputs), MissingInput)
    assert "--train-data" in err.message and "--validation-data" in err.message
    assert "--model" not in err.message
    assert err.details["inputs"] == ["train_data", "validation_data"]
    assert err.details["missing"] == ["--train-data", "--validation-data"]


def test_a_shared_input_must_exist_on_the_server(rt: Runtime, tmp_path: Path) -> None:
    inputs = Inputs(train_data=InputRef(kind=InputKind.SHARED, value=str(tmp_path / "nope")))
    err = rejected(rt, request(rt, inputs=inputs), Rejected)
    assert str(tmp_path / "nope") in err.message


def test_a_shared_input_that_exists_is_accepted(rt: Runtime, tmp_path: Path) -> None:
    (tmp_path / "data.jsonl").write_text("{}\n")
    inputs = Inputs(train_data=InputRef(kind=InputKind.SHARED, value=str(tmp_path / "data.jsonl")))
    assert jobs.submit(rt, "alice", request(rt, inputs=inputs)).created


def test_a_package_input_must_travel_in_the_package(rt: Runtime) -> None:
    inputs = Inputs(train_data=InputRef(kind=InputKind.PACKAGE, value="data/train.jsonl"))
    err = rejected(rt, request(rt, inputs=inputs), Rejected)
    assert "data/train.jsonl is not in the uploaded package" in err.message


def test_a_package_input_may_name_a_folder_of_the_package(rt: Runtime) -> None:
    inputs = Inputs(train_data=InputRef(kind=InputKind.PACKAGE, value="data"))
    req = SubmitRequest(
        spec=spec(inputs=inputs),
        manifest=package(rt, extra={"data/a.jsonl": b"{}\n"}),
        idempotency_key="k" * 16,
    )
    assert jobs.submit(rt, "alice", req).created


def test_blobs_the_server_lacks_are_listed(rt: Runtime) -> None:
    manifest = package(rt, extra={"common/util.py": b"x = 1\n"}, upload=False)
    req = SubmitRequest(spec=spec(), manifest=manifest, idempotency_key="k" * 16)
    err = rejected(rt, req, MissingBlobs)
    assert sorted(err.details["missing"]) == sorted(manifest.digests())


def test_the_entrypoint_must_be_in_the_package(rt: Runtime) -> None:
    digest = rt.storage.put_bytes(b"print(1)\n")
    manifest = Manifest(files=[FileEntry(path="experiments/exp/other.py", sha256=digest, size=9)])
    req = SubmitRequest(spec=spec(), manifest=manifest, idempotency_key="k" * 16)
    err = rejected(rt, req, MissingEntrypoint)
    assert "experiments/exp/train.sh" in err.message and err.exit_code == 2
