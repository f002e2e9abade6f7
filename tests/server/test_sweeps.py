"""Sweeps on the control plane: admitted whole, ranked by their metric, early-stopped by ASHA."""

from __future__ import annotations

import uuid

import pytest

from starforge.contract.api import IngestRequest, MetricStep
from starforge.contract.errors import NotFound, ParamError
from starforge.contract.jobspec import InputKind, InputRef, Inputs
from starforge.contract.states import EndReason, JobStatus
from starforge.contract.sweeps import EarlyStop, SweepRequest
from starforge.server.db.metrics import MetricPoint
from starforge.server.db.models import Run
from starforge.server.runtime import Runtime
from starforge.server.services.observability import metrics
from starforge.server.services.runs import actions, jobs, lifecycle
from starforge.server.services.workflows import sweeps

from .factories import (
    FakeExecutor,
    binding,
    member,
    package,
    report,
    run_row,
    schedule,
    spec,
    submit,
)

DATA = b'{"prompt": "a", "completion": "b"}\n'


def sft_request(
    rt: Runtime, variants: list[dict[str, object]], early_stop: EarlyStop | None = None
) -> SweepRequest:
    inputs = Inputs(
        model=InputRef(kind=InputKind.HUB, value="org/model"),
        train_data=InputRef(kind=InputKind.PACKAGE, value="data/train.jsonl"),
        validation_data=InputRef(kind=InputKind.PACKAGE, value="data/val.jsonl"),
    )
    return SweepRequest(
        spec=spec(method_id="trl/sft", inputs=inputs, profiles=["h200:1"]),
        manifest=package(
            rt, "exp", "trl/sft", extra={"data/train.jsonl": DATA, "data/val.jsonl": DATA}
        ),
        variants=variants,
        early_stop=early_stop,
        idempotency_key=uuid.uuid4().hex,
    )


GRID = [{"learning_rate": lr, "max_length": n} for lr in (1e-5, 3e-5) for n in (64, 128, 256)]


def test_a_sweep_admits_one_tagged_run_per_variant_sharing_one_package(rt: Runtime) -> None:
    req = sft_request(rt, GRID)
    created = sweeps.submit(rt, "alice", req)
    assert created.created and len(created.runs) == 6
    runs = [run_row(rt, r.run_id) for r in created.runs]
    assert {r.status for r in runs} == {"queued"}
    assert all(r.manifest == runs[0].manifest for r in runs)  # one package for all
    for i, run in enumerate(runs):
        assert run.spec["sweep"] == {"id": created.sweep_id, "index": i, "params": GRID[i]}
        assert run.spec["hyperparams"]["learning_rate"] == GRID[i]["learning_rate"]
        assert run.spec["hyperparams"]["max_length"] == GRID[i]["max_length"]
        assert run.config is not None and run.config["max_length"] == GRID[i]["max_length"]
    again = sweeps.submit(rt, "alice", req)  # the same request resent: the same sweep
    assert not again.created and again.sweep_id == created.sweep_id
    assert [r.run_id for r in again.runs] == [r.run_id for r in created.runs]


def test_a_sweep_with_one_bad_variant_creates_nothing(rt: Runtime) -> None:
    req = sft_request(rt, [{"learning_rate": 1e-5}, {"learning_rate": -1.0}])
    with pytest.raises(ParamError):
        sweeps.submit(rt, "alice", req)
    with rt.transaction() as session:
        assert session.query(Run).count() == 0


def test_another_users_sweep_is_not_found(rt: Runtime) -> None:
    created = sweeps.submit(rt, "alice", sft_request(rt, GRID[:2]))
    with pytest.raises(NotFound):
        sweeps.get(rt, member("bob"), created.sweep_id)
    assert len(sweeps.runs(rt, member("alice"), created.sweep_id[:6])) == 2


def log_metric(rt: Runtime, run_id: str, points: dict[int, float], key: str = "loss") -> None:
    with rt.transaction() as session:
        for step, value in points.items():
            session.merge(MetricPoint(run_id=run_id, key=key, step=step, value=value, at=0.0))


def start(rt: Runtime, run_ids: list[str]) -> None:
    for _ in run_ids:
        schedule(rt)
    for run_id in run_ids:
        report(rt, run_id, "starting")
        report(rt, run_id, "running")


def test_asha_stops_the_worst_half_at_the_first_rung_and_status_ranks_them(
    rt: Runtime, executor: FakeExecutor
) -> None:
    rule = EarlyStop(metric="loss", rungs=[5, 10], keep=2, mode="min")
    created = sweeps.submit(rt, "alice", sft_request(rt, GRID, rule))
    ids = [r.run_id for r in created.runs]
    start(rt, ids)
    assert {run_row(rt, i).status for i in ids} == {"running"}
    losses = [0.5, 0.7, 0.9, 0.6, 0.8, 1.0]  # by variant: the best is variant 0
    for run_id, loss in zip(ids[:5], losses, strict=False):
        log_metric(rt, run_id, {1: 2.0, 5: loss})
    # Five reached rung 5; the last may still. The two certain to be out stop; the third best
    # (0.7) is in the top three only if the last reports worse: it waits at the rung, paused.
    assert sweeps.early_stop_pass(rt) == 2
    stopped = {i for i in ids if run_row(rt, i).status == JobStatus.STOPPING}
    assert stopped == {ids[2], ids[4]}
    held = run_row(rt, ids[1])
    assert held.status == JobStatus.PAUSING
    assert held.reason.startswith(f"held by sweep {created.sweep_id} at rung 5: loss=0.7; ")
    assert "waiting for 1 more variant(s) to reach step 5" in held.reason
    assert {run_row(rt, i).status for i in (ids[0], ids[3], ids[5])} == {"running"}
    report(rt, ids[1], "exited", exit_code=143)  # it saved its checkpoint and exited
    assert run_row(rt, ids[1]).status == JobStatus.PAUSED
    assert run_row(rt, ids[1]).reason.startswith(f"held by sweep {created.sweep_id} at rung 5")
    sweeps.early_stop_pass(rt)
    assert run_row(rt, ids[1]).status == JobStatus.PAUSED  # still waiting for the last one

    log_metric(rt, ids[5], {5: 1.0})
    assert sweeps.early_stop_pass(rt) == 1
    assert run_row(rt, ids[5]).status == JobStatus.STOPPING
    promoted = run_row(rt, ids[1])
    assert promoted.status == JobStatus.QUEUED
    assert promoted.reason.startswith(
        f"promoted by sweep {created.sweep_id} at rung 5: in the top 1/2"
    )
    worst = run_row(rt, ids[5])
    assert worst.events[-1].actor == f"sweep {created.sweep_id}"
    assert worst.reason.startswith(
        f"early-stopped by sweep {created.sweep_id} at rung 5: loss=1 not in top 1/2"
    )
    assert len(executor.stopped) == 4  # three stopped variants and the held one were signalled
    for run_id in stopped | {ids[5]}:  # their runners exit
        report(rt, run_id, "exited", exit_code=143)
    assert run_row(rt, ids[5]).status == JobStatus.STOPPED
    sweeps.early_stop_pass(rt)
    assert run_row(rt, ids[5]).reason.startswith("early-stopped by sweep")  # not "by user"
    assert run_row(rt, ids[5]).end_reason == EndReason.EARLY_STOPPED

    view = sweeps.get(rt, member("alice"), created.sweep_id)
    assert [v.run_id for v in view.variants] == [ids[0], ids[3], ids[1], ids[4], ids[2], ids[5]]
    assert [v.rank for v in view.variants] == [1, 2, 3, 4, 5, 6]
    assert view.variants[0].params == GRID[0] and view.variants[0].metric == 0.5

    results = sweeps.stop(rt, member("alice"), created.sweep_id)
    assert [r.status for r in results].count(JobStatus.STOPPING) == 2  # variants 0 and 3
    assert [r.status for r in results].count(JobStatus.STOPPED) == 1  # the queued one


def ingest(rt: Runtime, run_id: str, points: dict[int, float]) -> None:
    """What the variant's job reports, with its own token, through the ingest endpoint's service."""
    body = IngestRequest(
        steps=[MetricStep(step=s, t=0.0, values={"loss": v}) for s, v in points.items()]
    )
    metrics.ingest(rt, run_id, binding(rt, run_id)["job_token"], body)


def test_a_variants_report_that_reaches_a_rung_is_judged_before_it_is_answered(
    rt: Runtime, executor: FakeExecutor
) -> None:
    rule = EarlyStop(metric="loss", rungs=[5, 10], keep=2, mode="min")
    created = sweeps.submit(rt, "alice", sft_request(rt, GRID[:2], rule))
    first, second = (r.run_id for r in created.runs)
    start(rt, [first, second])
    assert binding(rt, first)["sync_steps"] == [5, 10]  # STARFORGE_SYNC_STEPS of its job
    ingest(rt, first, {1: 2.0, 4: 1.0})
    assert run_row(rt, first).status == JobStatus.RUNNING  # no rung yet
    ingest(rt, first, {5: 0.5})
    # No pass of the loop ran: the report itself had the variant held at the rung it reached.
    held = run_row(rt, first)
    assert held.status == JobStatus.PAUSING
    assert held.reason.startswith(f"held by sweep {created.sweep_id} at rung 5: loss=0.5; ")
    ingest(rt, second, {6: 0.9})  # logged past the rung: judged at it all the same
    out = run_row(rt, second)
    assert out.status == JobStatus.STOPPING
    assert out.reason.startswith(
        f"early-stopped by sweep {created.sweep_id} at rung 5: loss=0.9 not in top 1/2"
    )
    assert len(executor.stopped) == 2  # both signalled, after their decisions were committed
    ingest(rt, second, {7: 0.8})  # no new rung: nothing more happens
    assert len(executor.stopped) == 2


def test_a_run_outside_any_sweep_reports_without_sync_steps(rt: Runtime) -> None:
    run_id = submit(rt).run_id
    assert schedule(rt) == [run_id]
    assert binding(rt, run_id)["sync_steps"] == []


def test_a_variant_its_user_paused_is_never_resumed_by_the_sweep(
    rt: Runtime, executor: FakeExecutor
) -> None:
    rule = EarlyStop(metric="loss", rungs=[5], keep=2, mode="min")
    created = sweeps.submit(rt, "alice", sft_request(rt, GRID[:4], rule))
    ids = [r.run_id for r in created.runs]
    start(rt, ids)
    for run_id, loss in zip(ids[:3], [0.1, 0.2, 0.3], strict=True):
        log_metric(rt, run_id, {5: loss})
    assert actions.pause(rt, member("alice"), ids[0]).accepted  # the best one, sure to be promoted
    report(rt, ids[0], "exited", exit_code=143)
    sweeps.early_stop_pass(rt)
    assert run_row(rt, ids[2]).status == JobStatus.STOPPING  # two better: out
    assert run_row(rt, ids[1]).status == JobStatus.PAUSING  # held: the fourth may beat it
    log_metric(rt, ids[3], {5: 0.9})
    report(rt, ids[1], "exited", exit_code=143)
    sweeps.early_stop_pass(rt)
    assert run_row(rt, ids[1]).status == JobStatus.QUEUED  # the sweep's hold is released
    assert run_row(rt, ids[0]).status == JobStatus.PAUSED  # the user's pause is not


def test_a_ruled_out_variant_ends_early_stopped_naming_sweep_rung_and_metric(
    rt: Runtime, executor: FakeExecutor
) -> None:
    rule = EarlyStop(metric="loss", rungs=[5], keep=2, mode="min")
    created = sweeps.submit(rt, "alice", sft_request(rt, GRID[:4], rule))
    ids = [r.run_id for r in created.runs]
    start(rt, ids)
    for run_id, loss in zip(ids, [0.1, 0.2, 2.31, 0.4], strict=True):
        log_metric(rt, run_id, {5: loss})
    assert sweeps.early_stop_pass(rt) == 2
    out = run_row(rt, ids[2])
    assert out.status == JobStatus.STOPPING and out.end_reason == EndReason.EARLY_STOPPED
    report(rt, ids[2], "exited", exit_code=143)  # its runner saw SIGTERM and exited
    shown = jobs.get(rt, member("alice"), ids[2])
    assert shown.status is JobStatus.STOPPED and shown.end_reason is EndReason.EARLY_STOPPED
    assert shown.reason.startswith(
        f"early-stopped by sweep {created.sweep_id} at rung 5: loss=2.31 not in top 1/2"
    )
    assert shown.attempts[-1].end_reason is EndReason.EARLY_STOPPED

    assert actions.stop(rt, member("alice"), ids[0]).accepted  # its user's stop stays a user's
    report(rt, ids[0], "exited", exit_code=143)
    mine = jobs.get(rt, member("alice"), ids[0])
    assert (mine.status, mine.end_reason, mine.reason) == (
        JobStatus.STOPPED, EndReason.STOPPED_BY_USER, "stopped by user",
    )  # fmt: skip


def test_a_variant_that_holds_nothing_is_early_stopped_at_once(rt: Runtime) -> None:
    created = sweeps.submit(rt, "alice", sft_request(rt, GRID[:1]))
    run_id = created.runs[0].run_id
    why = lifecycle.Stop(EndReason.EARLY_STOPPED, f"early-stopped by sweep {created.sweep_id}")
    with rt.transaction() as session:
        run = session.get(Run, run_id)
        assert run is not None and run.status == JobStatus.QUEUED
        assert actions.begin_stop(session, run, actor=f"sweep {created.sweep_id}", why=why) == []
    stopped = run_row(rt, run_id)
    assert (stopped.status, stopped.end_reason, stopped.reason) == (
        JobStatus.STOPPED, EndReason.EARLY_STOPPED, why.reason,
    )  # fmt: skip
    assert stopped.events[-1].actor == f"sweep {created.sweep_id}"
