"""The end of an attempt stores what its job left in the report spool: each point once, an older
attempt's late points never over a newer attempt's, a body it cannot read skipped (the run ends
all the same), and the files gone once stored."""

from __future__ import annotations

from pathlib import Path

from starforge.client.sender import Spool
from starforge.contract.api import IngestRequest
from starforge.contract.layout import RunLayout
from starforge.contract.states import JobStatus
from starforge.server.runtime import Runtime
from starforge.server.services.observability import metrics
from starforge.server.services.runs import actions
from starforge.server.services.scheduling import dispatch
from tests.server.factories import binding, member, report, run_row, running_run, schedule


def steps(attempt: int, values: dict[int, float]) -> dict[str, object]:
    return {
        "attempt": attempt,
        "steps": [{"step": s, "t": 1.0, "values": {"loss": v}} for s, v in values.items()],
    }


def stored(rt: Runtime, run_id: str) -> dict[int, float]:
    view = metrics.series(rt, member("alice"), run_id, max_points=100_000)
    return dict(zip(view.series[0].steps, view.series[0].values, strict=True))


def spool_of(rt: Runtime, run_id: str) -> Path:
    return RunLayout(dispatch.run_dir_of(rt, run_row(rt, run_id))).report_spool


def test_a_late_point_of_an_older_attempt_never_replaces_the_newer_attempts(rt: Runtime) -> None:
    run_id = running_run(rt)
    report(rt, run_id, "exited", exit_code=1)
    assert run_row(rt, run_id).status == JobStatus.FAILED
    assert actions.retry(rt, member("alice"), run_id).accepted
    assert run_id in schedule(rt)
    report(rt, run_id, "starting", attempt=2)
    report(rt, run_id, "running", attempt=2)
    second = binding(rt, run_id, attempt=2)["job_token"]  # attempt 2 re-logged steps 5..9
    metrics.ingest(
        rt, run_id, second, IngestRequest.model_validate(steps(2, dict.fromkeys(range(5, 10), 2.0)))
    )

    spool = Spool(spool_of(rt, run_id))
    spool.write(
        [
            steps(1, dict.fromkeys(range(10), 1.0)),  # attempt 1's, never delivered
            {"attempt": 2, "steps": "not a list"},  # unreadable: skipped
            {**steps(2, {10: 3.0}), "hparams": {"lr": 0.1}},  # attempt 2's last, undelivered
        ]
    )
    report(rt, run_id, "exited", attempt=2, exit_code=0)

    assert run_row(rt, run_id).status == JobStatus.SUCCEEDED
    assert stored(rt, run_id) == {
        **dict.fromkeys(range(5), 1.0),
        **dict.fromkeys(range(5, 10), 2.0),
        10: 3.0,
    }
    assert metrics.meta(rt, member("alice"), run_id).hparams == {"lr": 0.1}
    assert list(spool.folder.iterdir()) == []


def test_points_the_job_had_also_delivered_are_stored_once(rt: Runtime) -> None:
    run_id = running_run(rt)
    token = binding(rt, run_id)["job_token"]
    first = steps(1, {s: s / 10 for s in range(50)})
    metrics.ingest(rt, run_id, token, IngestRequest.model_validate(first))  # delivered...
    Spool(spool_of(rt, run_id)).write([first, steps(1, {s: s / 10 for s in range(50, 80)})])
    report(rt, run_id, "exited", exit_code=0)  # ...and spooled too (a lost answer)
    assert stored(rt, run_id) == {s: s / 10 for s in range(80)}
    assert metrics.count_points(rt, run_id) == 80
