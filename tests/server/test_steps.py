"""Steps of a run (``--then export --then eval``): admission, creation on success, views, retry."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from starforge.contract.api import ExportRequest, SubmitRequest
from starforge.contract.errors import Rejected, RunNotFound
from starforge.contract.jobspec import InputKind, InputRef, Inputs, JobSpec
from starforge.contract.states import JobStatus
from starforge.contract.steps import StepSpec, progress
from starforge.server import statemachine
from starforge.server.db.metrics import MetricPoint
from starforge.server.db.models import Run
from starforge.server.db.steps import RunStep
from starforge.server.executors.slurm_compile import BatchJob, Component, compile_batch
from starforge.server.runtime import Runtime
from starforge.server.services.data import blobs
from starforge.server.services.runs import actions, jobs
from starforge.server.services.workflows import exports, pipelines

from .factories import member, package, report, run_row, schedule, spec
from .lifecycle_factories import checkpoint

SFT_FILES = {
    "experiments/exp/config.yaml": b"max_steps: 2\n",
    "data/train.jsonl": b'{"prompt": "a", "completion": "b"}\n',
    "data/val.jsonl": b'{"prompt": "c", "completion": "d"}\n',
    "models/tiny/config.json": b"{}\n",
}


def sft_request(rt: Runtime, steps: list[str], method_id: str = "trl/sft") -> SubmitRequest:
    inputs = Inputs(
        model=InputRef(kind=InputKind.PACKAGE, value="models/tiny"),
        train_data=InputRef(kind=InputKind.PACKAGE, value="data/train.jsonl"),
        validation_data=InputRef(kind=InputKind.PACKAGE, value="data/val.jsonl"),
    )
    made = spec(method_id=method_id, profiles=["h200:1"], inputs=inputs)
    return SubmitRequest(
        spec=made.model_copy(update={"steps": steps}),
        manifest=package(rt, "exp", method_id, extra=SFT_FILES),
        idempotency_key=uuid.uuid4().hex,
    )


def submit_sft(rt: Runtime, steps: list[str]) -> str:
    req = sft_request(rt, steps)
    for digest in req.manifest.digests():
        blobs.record(rt, "alice", digest)
    return jobs.submit(rt, "alice", req).run_id


def succeed(rt: Runtime, run_id: str) -> None:
    """Place the queued run, let its runner report running, then a clean exit."""
    assert run_id in schedule(rt)
    report(rt, run_id, "starting")
    report(rt, run_id, "running")
    report(rt, run_id, "exited", exit_code=0)


def run_count(rt: Runtime) -> int:
    with rt.transaction() as session:
        return int(session.scalar(select(func.count()).select_from(Run)) or 0)


def step_of(rt: Runtime, run_id: str) -> StepSpec:
    step = JobSpec.read(run_row(rt, run_id).spec).step
    assert step is not None
    return step


def test_success_of_a_run_with_then_export_queues_its_export_step_on_a_cpu_node(
    rt: Runtime,
) -> None:
    root = submit_sft(rt, ["export"])
    succeed(rt, root)
    view = jobs.get(rt, member("alice"), root)
    assert view.status is JobStatus.SUCCEEDED
    [step] = view.steps
    assert (step.action, step.position, step.status) == ("export", 0, JobStatus.QUEUED)
    assert f"next step: export ({step.run_id})" in view.reason
    child = jobs.get(rt, member("alice"), step.run_id)
    assert child.step is not None and child.step.root_run_id == root
    assert child.gpus == 0 and child.pools[0].gpus_per_node == 0
    made = step_of(rt, step.run_id)
    assert (made.action, made.source_run_id) == ("export", root)
    assert [d.name for d in made.data] == ["train_data", "validation_data"]
    assert all(len(d.sha256) == 64 for d in made.data)
    assert progress(view.status.value, [s.status.value if s.status else None for s in view.steps])
    assert progress("succeeded", ["queued"]) == "0/1"


def test_the_export_step_is_placed_and_its_success_queues_eval_reading_the_export(
    rt: Runtime,
) -> None:
    root = submit_sft(rt, ["export", "eval"])
    succeed(rt, root)
    export_id = jobs.get(rt, member("alice"), root).steps[0].run_id
    with rt.transaction() as session:
        assert pipelines.succeeded_step(session, root, "export") is None  # not yet
    succeed(rt, export_id)  # a 0-GPU pool is placed like any other
    with rt.transaction() as session:
        found = pipelines.succeeded_step(session, root, "export")
        assert found is not None and found.id == export_id
    view = jobs.get(rt, member("alice"), root)
    assert [s.status for s in view.steps] == [JobStatus.SUCCEEDED, JobStatus.QUEUED]
    eval_id = view.steps[1].run_id
    made = step_of(rt, eval_id)
    assert (made.action, made.index, made.root_run_id) == ("eval", 1, root)
    assert made.source_run_id == export_id  # eval reads the exported model
    assert run_row(rt, eval_id).gpus == 1
    assert jobs.get(rt, member("alice"), eval_id).step.root_run_id == root  # type: ignore[union-attr]


def test_a_step_is_created_once_and_a_racing_second_copy_fails_its_transaction(
    rt: Runtime,
) -> None:
    root = submit_sft(rt, ["export"])
    succeed(rt, root)
    with rt.transaction() as session:
        run = session.get(Run, root)
        assert run is not None
        assert statemachine.start_next_step(session, run) is None  # it exists already
    [made] = jobs.get(rt, member("alice"), root).steps
    with pytest.raises(IntegrityError), rt.transaction() as session:  # what a race would insert
        session.add(RunStep(run_id=made.run_id + "x", root_run_id=root, position=0, action="x"))
    with rt.transaction() as session:
        rows = session.scalars(select(RunStep).where(RunStep.root_run_id == root)).all()
    assert [r.run_id for r in rows] == [made.run_id]
    assert run_count(rt) == 2


def test_a_run_without_steps_creates_nothing_when_it_succeeds(rt: Runtime) -> None:
    root = submit_sft(rt, [])
    succeed(rt, root)
    assert run_count(rt) == 1
    assert jobs.get(rt, member("alice"), root).steps == []


def test_listing_without_steps_hides_step_runs_and_with_steps_shows_them(rt: Runtime) -> None:
    root = submit_sft(rt, ["export"])
    succeed(rt, root)
    hidden = jobs.page(rt, member("alice"), hide_steps=True).runs
    shown = jobs.page(rt, member("alice")).runs
    assert [r.run_id for r in hidden] == [root]
    assert len(shown) == 2
    assert hidden[0].steps[0].status is JobStatus.QUEUED


def test_a_failed_export_shows_the_pipeline_short_and_retry_reruns_only_the_export(
    rt: Runtime,
) -> None:
    root = submit_sft(rt, ["export", "eval"])
    succeed(rt, root)
    export_id = jobs.get(rt, member("alice"), root).steps[0].run_id
    assert export_id in schedule(rt)
    report(rt, export_id, "starting")
    report(rt, export_id, "exited", exit_code=2)
    view = jobs.get(rt, member("alice"), root)
    statuses = [s.status.value if s.status else None for s in view.steps]
    assert progress(view.status.value, statuses) == "0/2!"
    answer = actions.retry(rt, member("alice"), export_id)
    assert answer.accepted, answer.message
    assert run_row(rt, export_id).status == JobStatus.QUEUED
    assert run_row(rt, root).status == JobStatus.SUCCEEDED  # training is not run again
    assert run_row(rt, root).current_attempt == 1


@pytest.mark.parametrize(
    ("steps", "method_id", "says"),
    [
        (["deploy"], "trl/sft", "does not declare the action 'deploy'"),
        (["eval"], "trl/sft", "--then eval needs --then export before it"),
        (["eval", "export"], "trl/sft", "--then eval needs --then export before it"),
        (["export", "export"], "trl/sft", "given twice"),
        (["export"], "custom/custom", "does not declare the action 'export'"),
    ],
)
def test_admission_refuses_a_pipeline_the_method_cannot_run_and_creates_nothing(
    rt: Runtime, steps: list[str], method_id: str, says: str
) -> None:
    if method_id == "custom/custom":
        made = spec().model_copy(update={"steps": steps})
        req = SubmitRequest(spec=made, manifest=package(rt), idempotency_key=uuid.uuid4().hex)
    else:
        req = sft_request(rt, [])
        req.spec.steps = steps  # type: ignore[assignment]  # what a hand-made client might send
    with pytest.raises(Rejected) as caught:
        jobs.submit(rt, "alice", req)
    assert says in caught.value.message
    assert caught.value.exit_code == 2
    assert run_count(rt) == 0


def test_admission_refuses_a_submission_that_claims_to_be_a_step(rt: Runtime) -> None:
    req = sft_request(rt, [])
    req.spec.step = StepSpec(action="export", index=0, root_run_id="r-x", source_run_id="r-x")
    with pytest.raises(Rejected, match="set by the platform"):
        jobs.submit(rt, "alice", req)
    assert run_count(rt) == 0


# ---- sf export ---------------------------------------------------------------------------------


def test_sf_export_queues_an_export_run_of_the_chosen_checkpoint_once_per_key(
    rt: Runtime,
) -> None:
    root = submit_sft(rt, [])
    succeed(rt, root)
    checkpoint(rt, root, "checkpoint-4", hf=True)
    req = ExportRequest(checkpoint_step=4, idempotency_key=uuid.uuid4().hex)
    made = exports.export(rt, member("alice"), root, req)
    again = exports.export(rt, member("alice"), root, req)
    assert (made.created, again.created, again.run_id) == (True, False, made.run_id)
    step = step_of(rt, made.run_id)
    assert (step.action, step.source_run_id, step.checkpoint_step) == ("export", root, 4)
    assert run_row(rt, made.run_id).status == JobStatus.QUEUED
    assert jobs.get(rt, member("alice"), root).steps == []  # not one of the run's --then steps


@pytest.mark.parametrize(
    ("step", "has_one", "says"),
    [(9, True, "no checkpoint at step 9"), (None, False, "has no checkpoint")],
)
def test_sf_export_refuses_a_checkpoint_the_run_does_not_have(
    rt: Runtime, step: int | None, has_one: bool, says: str
) -> None:
    root = submit_sft(rt, [])
    succeed(rt, root)
    if has_one:
        checkpoint(rt, root, "checkpoint-4", hf=True)
    req = ExportRequest(checkpoint_step=step, idempotency_key=uuid.uuid4().hex)
    with pytest.raises(Rejected) as caught:
        exports.export(rt, member("alice"), root, req)
    assert says in caught.value.message
    assert caught.value.exit_code == 2
    assert run_count(rt) == 1


def test_sf_export_of_another_users_run_is_as_if_it_did_not_exist(rt: Runtime) -> None:
    root = submit_sft(rt, [])
    req = ExportRequest(idempotency_key=uuid.uuid4().hex)
    with pytest.raises(RunNotFound):
        exports.export(rt, member("bob"), root, req)


def test_the_export_step_records_each_metrics_final_value_leaving_out_infinite_ones(
    rt: Runtime,
) -> None:
    root = submit_sft(rt, ["export"])
    assert root in schedule(rt)
    report(rt, root, "starting")
    report(rt, root, "running")
    with rt.transaction() as session:
        for step, loss, acc in [(1, 2.0, 0.1), (2, 1.5, float("inf")), (3, 1.25, float("inf"))]:
            session.add(MetricPoint(run_id=root, key="loss", step=step, value=loss, at=0.0))
            session.add(MetricPoint(run_id=root, key="acc", step=step, value=acc, at=0.0))
    report(rt, root, "exited", exit_code=0)
    [step] = jobs.get(rt, member("alice"), root).steps
    assert step_of(rt, step.run_id).metrics == {"loss": 1.25}


def test_a_cpu_step_on_slurm_asks_for_no_gpu() -> None:
    cpu = Component(partition="p", gres_type="h200", gpus_per_node=0, nodes=["n1"], bindings=["b"])
    gpu = Component(partition="p", gres_type="h200", gpus_per_node=1, nodes=["n1"], bindings=["b"])
    batch = [BatchJob(job_name="j", log_path="l", workdir="w", components=[c], runner=["r"])
             for c in (cpu, gpu)]  # fmt: skip
    assert "--gres" not in compile_batch(batch[0])
    assert "#SBATCH --gres=gpu:h200:1" in compile_batch(batch[1])
