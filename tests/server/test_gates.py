"""Eval gates in a run's status: the failed gate's bound and value on the eval step, and the
training run's reason saying how its pipeline ended."""

from __future__ import annotations

import json
import uuid

from starforge.contract.api import SubmitRequest
from starforge.contract.states import JobStatus
from starforge.contract.steps import EVAL_REPORT
from starforge.server.runtime import Runtime
from starforge.server.services.data import blobs
from starforge.server.services.runs import jobs
from starforge.server.services.scheduling import dispatch

from .factories import member, package, report, run_row, schedule
from .test_steps import SFT_FILES, sft_request, succeed

GATED = {
    **SFT_FILES,
    "experiments/exp/config.yaml": b"max_steps: 2\neval:\n  gate: {metric: loss, max: 0.001}\n",
}


def submit_gated(rt: Runtime) -> str:
    req = sft_request(rt, ["export", "eval"])
    req = SubmitRequest(
        spec=req.spec,
        manifest=package(rt, "exp", "trl/sft", extra=GATED),
        idempotency_key=uuid.uuid4().hex,
    )
    for digest in req.manifest.digests():
        blobs.record(rt, "alice", digest)
    return jobs.submit(rt, "alice", req).run_id


def eval_reports(rt: Runtime, run_id: str, passed: bool, value: float) -> None:
    """What the eval program writes before it exits (3 when the gate failed)."""
    out = dispatch.run_dir_of(rt, run_row(rt, run_id)) / "out"
    (out / EVAL_REPORT).parent.mkdir(parents=True, exist_ok=True)
    word = "passed" if passed else "failed"
    verdict = {"metric": "loss", "value": value, "passed": passed,
               "reason": f"gate loss <= 0.001 {word}: loss = {value:.6g}"}  # fmt: skip
    (out / EVAL_REPORT).write_text(json.dumps({"metrics": {"loss": value}, "gate": verdict}))
    assert run_id in schedule(rt)
    report(rt, run_id, "starting")
    report(rt, run_id, "running")
    report(rt, run_id, "exited", exit_code=0 if passed else 3)


def test_a_failed_gate_names_its_bound_and_value_on_the_step_and_ends_the_pipeline(
    rt: Runtime,
) -> None:
    root = submit_gated(rt)
    succeed(rt, root)
    export_id = jobs.get(rt, member("alice"), root).steps[0].run_id
    succeed(rt, export_id)
    view = jobs.get(rt, member("alice"), root)
    eval_id = view.steps[1].run_id
    assert (
        view.reason
        == f"completed; step export ({export_id}) succeeded; next step: eval ({eval_id})"
    )
    gate = jobs.get(rt, member("alice"), eval_id).gate
    assert gate is not None and (gate.metric, gate.bound, gate.threshold) == ("loss", "max", 0.001)
    assert gate.passed is None and gate.value is None  # not judged yet

    eval_reports(rt, eval_id, passed=False, value=2.31)
    step = jobs.get(rt, member("alice"), eval_id)
    assert step.status is JobStatus.FAILED and step.exit_code == 3
    assert step.reason == "eval gate failed: loss = 2.31, at most 0.001 required (exit code 3)"
    assert step.gate is not None and (step.gate.value, step.gate.passed) == (2.31, False)
    view = jobs.get(rt, member("alice"), root)
    assert view.reason == (
        f"completed; pipeline stopped at step eval ({eval_id}), failed: eval gate failed: "
        "loss = 2.31, at most 0.001 required (exit code 3)"
    )
    assert view.gate is not None and view.gate.run_id == eval_id and view.gate.passed is False


def test_a_pipeline_whose_every_step_succeeded_says_so_on_the_training_run(rt: Runtime) -> None:
    root = submit_gated(rt)
    succeed(rt, root)
    export_id = jobs.get(rt, member("alice"), root).steps[0].run_id
    succeed(rt, export_id)
    eval_id = jobs.get(rt, member("alice"), root).steps[1].run_id
    eval_reports(rt, eval_id, passed=True, value=0.0005)
    view = jobs.get(rt, member("alice"), root)
    assert view.reason == (
        f"completed; pipeline done: export ({export_id}), eval ({eval_id}) succeeded"
    )
    assert view.gate is not None and view.gate.passed is True and view.gate.value == 0.0005
