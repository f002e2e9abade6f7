"""Sweeps on the control plane: admitted whole, ranked by their metric, early-stopped by ASHA."""

from __future__ import annotations

import uuid

import pytest

from starforge.contract.errors import NotFound, ParamError
from starforge.contract.jobspec import InputKind, InputRef, Inputs
from starforge.contract.states import JobStatus
from starforge.contract.sweeps import EarlyStop, SweepRequest
from starforge.server.db.metrics import MetricPoint
from starforge.server.db.models import Run
from starforge.server.runtime import Runtime
from starforge.server.services import sweeps

from .factories import FakeExecutor, package, report, run_row, schedule, spec

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
        sweeps.get(rt, "bob", created.sweep_id)
    assert len(sweeps.runs(rt, "alice", created.sweep_id[:6])) == 2


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
    # Five reached rung 5; the last may still: only the two certain to be out stop now.
    assert sweeps.early_stop_pass(rt) == 2
    stopped = {i for i in ids if run_row(rt, i).status == JobStatus.STOPPING}
    assert stopped == {ids[2], ids[4]}
    log_metric(rt, ids[5], {5: 1.0})
    assert sweeps.early_stop_pass(rt) == 1
    assert run_row(rt, ids[5]).status == JobStatus.STOPPING
    worst = run_row(rt, ids[5])
    assert worst.events[-1].actor == f"sweep {created.sweep_id}"
    assert worst.reason.startswith(
        f"early-stopped by sweep {created.sweep_id} at rung 5: loss=1 not in top 1/2"
    )
    assert len(executor.stopped) == 3  # each stopped variant's runner was signalled
    for run_id in stopped | {ids[5]}:  # their runners exit
        report(rt, run_id, "exited", exit_code=143)
    assert run_row(rt, ids[5]).status == JobStatus.STOPPED
    sweeps.early_stop_pass(rt)
    assert run_row(rt, ids[5]).reason.startswith("early-stopped by sweep")  # not "by user"

    view = sweeps.get(rt, "alice", created.sweep_id)
    assert [v.run_id for v in view.variants] == [ids[0], ids[3], ids[1], ids[4], ids[2], ids[5]]
    assert [v.rank for v in view.variants] == [1, 2, 3, 4, 5, 6]
    assert view.variants[0].params == GRID[0] and view.variants[0].metric == 0.5

    results = sweeps.stop(rt, "alice", created.sweep_id)
    assert {r.status for r in results} == {JobStatus.STOPPING} and len(results) == 3
