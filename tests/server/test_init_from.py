"""``--init-from`` at admission: the parent's artifact resolved and recorded, or a rejection
(exit 2) that names what is missing, with nothing created."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from sqlalchemy import func, select

from starforge.contract.api import SubmitRequest
from starforge.contract.env import model_location
from starforge.contract.errors import ConfigError, Rejected
from starforge.contract.jobspec import InputKind, InputRef, Inputs, JobSpec
from starforge.contract.lineage import parse_init_from
from starforge.server.db.models import Run
from starforge.server.runtime import Runtime
from starforge.server.services.data import blobs
from starforge.server.services.runs import jobs

from .factories import insert_run, package, run_row, spec, submit

HUB = InputRef(kind=InputKind.HUB, value="org/data")
TRL_INPUTS = Inputs(
    model=InputRef(kind=InputKind.HUB, value="org/tiny"), train_data=HUB, validation_data=HUB
)
CHILD_INPUTS = Inputs(train_data=HUB, validation_data=HUB)  # no --model: the parent's artifact


def count_runs(rt: Runtime) -> int:
    with rt.transaction() as session:
        return int(session.scalar(select(func.count()).select_from(Run)) or 0)


def out_dir(rt: Runtime, run_id: str, user: str = "alice") -> Path:
    run = run_row(rt, run_id)
    return rt.storage.run_layout(user, run.project, run.experiment, run_id).out


def sft_parent(rt: Runtime, *steps: int, user: str = "alice") -> str:
    """A trl/sft run of ``user`` with complete checkpoints at ``steps``."""
    run_id = submit(rt, user, method_id="trl/sft", inputs=TRL_INPUTS).run_id
    for step in steps:
        folder = out_dir(rt, run_id, user) / "checkpoints" / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return run_id


def child_request(rt: Runtime, flag: str, method_id: str = "trl/dpo") -> SubmitRequest:
    child = spec(method_id=method_id, inputs=CHILD_INPUTS).model_copy(
        update={"init_from": parse_init_from(flag)}
    )
    return SubmitRequest(
        spec=JobSpec.model_validate(child.model_dump()),
        manifest=package(rt, "exp", method_id),
        idempotency_key=uuid.uuid4().hex,
    )


def stored_spec(rt: Runtime, run_id: str) -> JobSpec:
    return JobSpec.read(run_row(rt, run_id).spec)


def test_a_run_starts_from_the_parents_latest_checkpoint_and_records_it(rt: Runtime) -> None:
    parent = sft_parent(rt, 5, 10)

    resp = jobs.submit(rt, "alice", child_request(rt, f"run/{parent}/checkpoint"))

    init = stored_spec(rt, resp.run_id).init_from
    assert init is not None
    latest = out_dir(rt, parent) / "checkpoints" / "checkpoint-10"
    assert (init.run_id, init.resolved_step, init.parent_method) == (parent, 10, "trl/sft")
    assert init.path == str(latest)
    # The job's model is the checkpoint (FORGE_MODEL), not a --model.
    assert model_location(stored_spec(rt, resp.run_id), "/work") == str(latest)


def test_a_step_picks_that_checkpoint(rt: Runtime) -> None:
    parent = sft_parent(rt, 5, 10)
    resp = jobs.submit(rt, "alice", child_request(rt, f"run/{parent}/checkpoint@step=5"))
    init = stored_spec(rt, resp.run_id).init_from
    assert init is not None and init.resolved_step == 5 and init.path.endswith("checkpoint-5")


def test_resubmitting_the_same_request_is_the_same_run(rt: Runtime) -> None:
    parent = sft_parent(rt, 5)
    req = child_request(rt, f"run/{parent}/checkpoint")
    first, again = jobs.submit(rt, "alice", req), jobs.submit(rt, "alice", req)
    assert again.run_id == first.run_id and not again.created


def test_an_export_of_the_parent_is_found_in_its_export_step_run(rt: Runtime) -> None:
    parent = sft_parent(rt, 5)
    insert_run(rt, "r-export0001")  # the export step run of the parent (steps machinery)
    with rt.transaction() as session:
        step_run = session.get(Run, "r-export0001")
        assert step_run is not None
        step_run.spec = {"step": {"action": "export", "root_run_id": parent}}
        step_run.status = "succeeded"
    folder = out_dir(rt, "r-export0001") / "export"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")

    resp = jobs.submit(rt, "alice", child_request(rt, f"run/{parent}/export", "trl/grpo"))

    init = stored_spec(rt, resp.run_id).init_from
    assert init is not None and init.path == str(folder) and init.kind == "export"


@pytest.mark.parametrize(
    ("flag", "says"),
    [
        ("run/r-nope000000/checkpoint", "no run r-nope000000 of yours"),
        ("run/{parent}/checkpoint@step=7", "has no complete checkpoint at step 7 (it has steps 5)"),
        ("run/{parent}/export", "has no export"),
    ],
)
def test_a_missing_run_step_or_artifact_is_rejected_and_nothing_is_created(
    rt: Runtime, flag: str, says: str
) -> None:
    parent = sft_parent(rt, 5)
    before = count_runs(rt)

    with pytest.raises(Rejected) as raised:
        jobs.submit(rt, "alice", child_request(rt, flag.format(parent=parent)))

    assert says in str(raised.value) and raised.value.exit_code == 2
    assert raised.value.hint
    assert count_runs(rt) == before


def test_another_users_run_reads_as_absent(rt: Runtime) -> None:
    theirs = sft_parent(rt, 5, user="bob")
    before = count_runs(rt)
    with pytest.raises(Rejected, match=f"no run {theirs} of yours"):
        jobs.submit(rt, "alice", child_request(rt, f"run/{theirs}/checkpoint"))
    assert count_runs(rt) == before


def test_a_checkpoint_of_an_incompatible_method_is_rejected(rt: Runtime) -> None:
    parent = submit(rt).run_id  # custom/custom
    ckpt = out_dir(rt, parent) / "step-3"
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    ckpt.write_text("weights")
    before = count_runs(rt)
    with pytest.raises(Rejected) as raised:
        jobs.submit(rt, "alice", child_request(rt, f"run/{parent}/checkpoint"))
    assert "a custom checkpoint (custom/custom) cannot start a trl run (trl/dpo)" in str(
        raised.value
    )
    assert count_runs(rt) == before


def test_a_client_may_not_fill_in_the_resolved_path(rt: Runtime) -> None:
    parent = sft_parent(rt, 5)
    req = child_request(rt, f"run/{parent}/checkpoint")
    assert req.spec.init_from is not None
    forged = req.spec.init_from.model_copy(update={"path": "/etc"})
    req = req.model_copy(update={"spec": req.spec.model_copy(update={"init_from": forged})})
    with pytest.raises(Rejected, match="server's to fill"):
        jobs.submit(rt, "alice", req)


def test_a_gate_on_a_metric_the_eval_does_not_produce_is_rejected(rt: Runtime) -> None:
    config = b"max_steps: 2\neval:\n  gate: {metric: accuracy, min: 0.9}\n"
    manifest = package(rt, "exp", "trl/sft", extra={"experiments/exp/config.yaml": config})
    for digest in manifest.digests():
        blobs.record(rt, "alice", digest)
    req = SubmitRequest(
        spec=spec(method_id="trl/sft", inputs=TRL_INPUTS),
        manifest=manifest,
        idempotency_key=uuid.uuid4().hex,
    )
    with pytest.raises(ConfigError) as raised:
        jobs.submit(rt, "alice", req)
    assert "metric 'accuracy' is not produced by the eval of trl/sft" in str(raised.value)
    assert raised.value.exit_code == 2 and count_runs(rt) == 0
