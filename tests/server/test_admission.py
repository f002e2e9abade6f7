"""Admission: each rejection names what was wrong and creates nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from starforge.cli.submit_flow import SubmitOptions, prepare
from starforge.contract.api import SubmitRequest
from starforge.contract.env import Binding, job_env
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
from starforge.project.lab import Lab
from starforge.server.db.models import Run
from starforge.server.runtime import Runtime
from starforge.server.services.data import blobs
from starforge.server.services.runs import jobs
from tests.conftest import commit_all

from .factories import binding, package, request, schedule, spec

HUB_MODEL = InputRef(kind=InputKind.HUB, value="org/model")


def rejected(rt: Runtime, req: SubmitRequest, kind: type[StarForgeError]) -> StarForgeError:
    with pytest.raises(kind) as err:
        jobs.submit(rt, "alice", req)
    with rt.transaction() as session:
        assert session.scalar(select(func.count()).select_from(Run)) == 0
    assert not (rt.storage.root / "runs").exists()
    return err.value


def test_a_valid_submission_is_queued_and_its_files_are_laid_out_when_it_is_placed(
    rt: Runtime,
) -> None:
    resp = jobs.submit(rt, "alice", request(rt))
    assert resp.created and resp.status is JobStatus.QUEUED and resp.queue_position == 1
    run_json = rt.storage.root / "runs/alice/proj/exp" / resp.run_id / "state/run.json"
    assert not run_json.exists()  # the database row is the record of a queued run
    assert schedule(rt) == [resp.run_id]
    assert json.loads(run_json.read_text())["spec"]["experiment"] == "exp"


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
    rt.settings.shared_roots = [tmp_path]  # absolute inputs are admitted only under a shared root
    inputs = Inputs(train_data=InputRef(kind=InputKind.SHARED, value=str(tmp_path / "nope")))
    err = rejected(rt, request(rt, inputs=inputs), Rejected)
    assert str(tmp_path / "nope") in err.message


def test_a_shared_input_that_exists_is_accepted(rt: Runtime, tmp_path: Path) -> None:
    rt.settings.shared_roots = [tmp_path]
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
    blobs.record(rt, "alice", digest)  # alice uploaded it: only then is her package looked at
    manifest = Manifest(files=[FileEntry(path="experiments/exp/other.py", sha256=digest, size=9)])
    req = SubmitRequest(spec=spec(), manifest=manifest, idempotency_key="k" * 16)
    err = rejected(rt, req, MissingEntrypoint)
    assert "experiments/exp/train.sh" in err.message and err.exit_code == 2


# ---- the CLI and admission refuse alike --------------------------------------------------------


def _cli_refusal(new_lab: Callable[..., Lab], case: str) -> StarForgeError:
    made = new_lab(experiments_={"exp": "custom/custom", "g1": "trl/grpo"})
    options: dict[str, Any] = {
        "experiment": "exp",
        "profiles": ["h200:8"],
        "image": "registry.example/train:v1",
        "observability_url": "https://wandb.example/proj",
        "cwd": made.root,
    }
    if case == "inputs":
        options |= {"experiment": "g1", "model": "org/model", "observability_url": None}
    elif case == "image":
        options["image"] = None
    elif case == "entrypoint":
        (made.root / "experiments" / "exp" / "train.sh").unlink()
        commit_all(made.root, "lose the entrypoint")
    elif case == "roles":
        options["profiles"] = ["rollout=h200:8"]
    with pytest.raises(StarForgeError) as err:
        prepare(SubmitOptions(**options))
    return err.value


def _admission_request(rt: Runtime, case: str) -> SubmitRequest:
    if case == "inputs":
        return request(rt, method_id="trl/grpo", inputs=Inputs(model=HUB_MODEL))
    if case == "roles":
        return request(rt, profiles=["rollout=h200:8"])
    req = request(rt)
    if case == "image":
        return req.model_copy(update={"spec": req.spec.model_copy(update={"image": ""})})
    other = rt.storage.put_bytes(b"x = 1\n")
    blobs.record(rt, "alice", other)  # hers: ownership is checked before anything else
    manifest = Manifest(files=[FileEntry(path="experiments/exp/other.py", sha256=other, size=6)])
    return req.model_copy(update={"manifest": manifest})


@pytest.mark.parametrize("case", ["inputs", "image", "entrypoint", "roles"])
def test_the_cli_and_admission_refuse_a_broken_rule_with_the_same_error(
    rt: Runtime, new_lab: Callable[..., Lab], case: str
) -> None:
    on_client = _cli_refusal(new_lab, case)
    on_server = rejected(rt, _admission_request(rt, case), StarForgeError)
    assert type(on_client) is type(on_server)
    assert (on_client.code, on_client.exit_code) == (on_server.code, on_server.exit_code)
    assert on_server.exit_code == 2
    assert on_client.message == on_server.message


# ---- the profile's env is the run's, from admission on ----------------------------------------


def test_editing_a_profiles_env_after_admission_leaves_the_queued_run_as_it_was(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    queued = jobs.submit(rt, "alice", request(rt)).run_id
    h200 = next(p for p in rt.settings.profiles if p.name == "h200")
    monkeypatch.setitem(h200.env, "NCCL_X", "edited")  # the admin edits the server's settings
    later = jobs.submit(rt, "alice", request(rt)).run_id
    assert schedule(rt) == [queued, later]
    queued_env = job_env(spec(), Binding.model_validate(binding(rt, queued)))
    later_env = job_env(spec(), Binding.model_validate(binding(rt, later)))
    assert queued_env["NCCL_X"] == "1"
    assert later_env["NCCL_X"] == "edited"  # a run admitted after the edit gets the new env


def test_admission_stores_the_composed_config_for_the_runner(rt: Runtime) -> None:
    config = b"starforge:\n  observability: platform\nsteps: 3\n"
    manifest = package(rt, extra={"experiments/exp/config.yaml": config})
    job = spec().model_copy(update={"observability_url": ""})
    resp = jobs.submit(
        rt, "alice", SubmitRequest(spec=job, manifest=manifest, idempotency_key="k" * 16)
    )
    with rt.transaction() as session:
        row = session.get(Run, resp.run_id)
        assert row is not None and row.config is not None and row.config["steps"] == 3
    assert schedule(rt) == [resp.run_id]
    run_json = rt.storage.root / "runs/alice/proj/exp" / resp.run_id / "state/run.json"
    stored = json.loads(run_json.read_text())
    assert stored["config"]["steps"] == 3
