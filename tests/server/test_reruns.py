"""Reruns on the control plane: a new run from what a run recorded, changed only where asked,
through the same admission and idempotency as a submission."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import func, select

from starforge.contract.api import SubmitRequest
from starforge.contract.auth import Role
from starforge.contract.datasets import DatasetPush
from starforge.contract.errors import ParamError, Rejected, RunNotFound
from starforge.contract.jobspec import FileEntry, InputKind, InputRef, Inputs
from starforge.contract.reruns import RerunRequest
from starforge.contract.states import JobStatus
from starforge.server.db.models import Run
from starforge.server.runtime import Runtime
from starforge.server.services.access import users
from starforge.server.services.data import blobs, datasets
from starforge.server.services.runs import jobs, reruns
from starforge.server.services.workflows import sweeps

from .factories import force, insert_run, member, package, run_row, spec, submit
from .test_sweeps import sft_request

DATA = b'{"prompt": "a", "completion": "b"}\n'
SFT_INPUTS = Inputs(
    model=InputRef(kind=InputKind.HUB, value="org/model"),
    train_data=InputRef(kind=InputKind.PACKAGE, value="data/train.jsonl"),
    validation_data=InputRef(kind=InputKind.PACKAGE, value="data/val.jsonl"),
)


def sft_run(rt: Runtime, user: str = "alice", **hyperparams: object) -> str:
    """A finished trl/sft run of ``user`` with ``hyperparams``."""
    req = SubmitRequest(
        spec=spec(method_id="trl/sft", inputs=SFT_INPUTS, profiles=["h200:1"]).model_copy(
            update={"hyperparams": hyperparams}
        ),
        manifest=package(
            rt, "exp", "trl/sft", extra={"data/train.jsonl": DATA, "data/val.jsonl": DATA}
        ),
        idempotency_key=uuid.uuid4().hex,
        max_retries=3,
    )
    run_id = jobs.submit(rt, user, req).run_id
    force(rt, run_id, JobStatus.STARTING, JobStatus.RUNNING, JobStatus.SUCCEEDED)
    return run_id


def ask(*sets: str, profiles: list[str] | None = None, key: str | None = None) -> RerunRequest:
    return RerunRequest(sets=list(sets), profiles=profiles, idempotency_key=key or uuid.uuid4().hex)


def count_runs(rt: Runtime) -> int:
    with rt.transaction() as session:
        return int(session.scalar(select(func.count()).select_from(Run)) or 0)


def test_a_rerun_is_a_new_run_with_the_same_package_spec_and_config(rt: Runtime) -> None:
    old = sft_run(rt, learning_rate=1e-4, seed=7)
    got = reruns.rerun(rt, member("alice"), old[:6], ask())
    assert got.created and got.run_id != old and got.rerun_of == old
    assert got.status == JobStatus.QUEUED and got.changes == [] and got.notes == []
    was, now = run_row(rt, old), run_row(rt, got.run_id)
    assert now.manifest == was.manifest
    assert got.package_files == len({f["sha256"] for f in was.manifest["files"]})
    assert now.config == was.config and now.pools == was.pools and now.max_retries == 3
    assert now.spec == was.spec  # commit, hyperparams, inputs, profile, method lock
    view = jobs.get(rt, member("alice"), got.run_id)
    assert view.rerun_of == old and jobs.get(rt, member("alice"), old).rerun_of == ""


def test_an_override_changes_that_key_only_and_the_answer_names_it(rt: Runtime) -> None:
    old = sft_run(rt, learning_rate=1e-4, seed=7)
    got = reruns.rerun(rt, member("alice"), old, ask("learning_rate=0.001", "seed=7"))
    assert [(c.key, c.old, c.new) for c in got.changes] == [("learning_rate", 1e-4, 1e-3)]
    was, now = run_row(rt, old), run_row(rt, got.run_id)
    assert now.spec["hyperparams"] == {**was.spec["hyperparams"], "learning_rate": 1e-3}
    assert now.config is not None and was.config is not None
    assert now.config["learning_rate"] == 1e-3
    assert {k: v for k, v in now.config.items() if k != "learning_rate"} == {
        k: v for k, v in was.config.items() if k != "learning_rate"
    }


def test_a_profile_override_is_recorded_as_a_change(rt: Runtime) -> None:
    old = sft_run(rt)
    got = reruns.rerun(rt, member("alice"), old, ask(profiles=["h100:1"]))
    assert [(c.key, c.old, c.new) for c in got.changes] == [("profile", ["h200:1"], ["h100:1"])]
    assert jobs.get(rt, member("alice"), got.run_id).profiles == ["h100:1"]


def test_an_unknown_override_key_is_a_param_error_naming_it_and_creates_nothing(
    rt: Runtime,
) -> None:
    old = sft_run(rt)
    before = count_runs(rt)
    with pytest.raises(ParamError) as raised:
        reruns.rerun(rt, member("alice"), old, ask("lerning_rate=0.1"))
    assert "lerning_rate" in raised.value.message and "learning_rate" in str(raised.value.hint)
    with pytest.raises(ParamError, match="learning_rate"):
        reruns.rerun(rt, member("alice"), old, ask("learning_rate=-1"))  # out of the declared range
    assert count_runs(rt) == before


def test_an_unknown_run_or_another_users_run_is_not_found(rt: Runtime) -> None:
    with pytest.raises(RunNotFound):
        reruns.rerun(rt, member("alice"), "r-doesnotexist", ask())
    bobs = sft_run(rt, "bob")
    with pytest.raises(RunNotFound):
        reruns.rerun(rt, member("alice"), bobs, ask())


def test_the_same_request_resent_makes_one_run(rt: Runtime) -> None:
    old = sft_run(rt)
    first = reruns.rerun(rt, member("alice"), old, ask("seed=3", key="resent-key-1"))
    again = reruns.rerun(rt, member("alice"), old, ask("seed=3", key="resent-key-1"))
    assert first.created and not again.created and again.run_id == first.run_id
    assert again.changes == first.changes


def test_an_operator_may_not_rerun_a_package_it_did_not_upload(rt: Runtime) -> None:
    old = sft_run(rt, "bob")
    operator = users.Caller("olga", Role.OPERATOR)
    with pytest.raises(Rejected, match=f"run {old} is bob's"):
        reruns.rerun(rt, operator, old, ask())
    for digest in [f["sha256"] for f in run_row(rt, old).manifest["files"]]:
        blobs.record(rt, "olga", digest)  # the operator sent the same files
    got = reruns.rerun(rt, operator, old, ask())
    assert run_row(rt, got.run_id).user == "olga" and got.rerun_of == old


def test_a_dataset_read_at_latest_is_pinned_to_the_version_the_run_read(rt: Runtime) -> None:
    def push(version: str, data: bytes) -> None:
        digest = rt.storage.put_bytes(data)
        blobs.record(rt, "alice", digest)
        entry = FileEntry(path="train.jsonl", sha256=digest, size=len(data))
        datasets.push(rt, "alice", DatasetPush(name="prompts", version=version, files=[entry]))

    push("v1", b'{"prompt": "v1"}\n')
    inputs = Inputs(
        train_data=InputRef(kind=InputKind.DATASET, value="train.jsonl", dataset="alice/prompts")
    )
    old = submit(rt, "alice", inputs=inputs).run_id
    push("v2", b'{"prompt": "v2"}\n')
    got = reruns.rerun(rt, member("alice"), old, ask())
    assert jobs.get(rt, member("alice"), got.run_id).datasets == {"train_data": "alice/prompts@v1"}
    assert got.notes == [
        "train_data: alice/prompts pinned to alice/prompts@v1, the version the run read"
    ]
    assert run_row(rt, got.run_id).config == run_row(rt, old).config


def test_a_sweep_variant_is_rerun_as_a_run_of_its_own(rt: Runtime) -> None:
    made = sweeps.submit(rt, "alice", sft_request(rt, [{"learning_rate": 3e-5}]))
    variant = made.runs[0].run_id
    got = reruns.rerun(rt, member("alice"), variant, ask())
    now = run_row(rt, got.run_id)
    assert "sweep" not in now.spec and now.spec["hyperparams"]["learning_rate"] == 3e-5
    assert got.notes == [f"not a variant of sweep {made.sweep_id}: a rerun is a run of its own"]


def test_a_run_whose_record_is_not_a_submission_is_refused_with_what_to_do(rt: Runtime) -> None:
    insert_run(rt, "r-bare000001", status=JobStatus.FAILED)  # a row without a spec
    with pytest.raises(Rejected, match="cannot be rerun") as raised:
        reruns.rerun(rt, member("alice"), "r-bare000001", ask())
    assert "commit" in str(raised.value.hint)
