"""The soak's invariants (bench/soak_checks.py) on made-up run views: each one that a broken
platform would break says so, with the run it caught."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "bench"
_spec = importlib.util.spec_from_file_location("soak_checks", BENCH / "soak_checks.py")
assert _spec is not None and _spec.loader is not None
checks = importlib.util.module_from_spec(_spec)
sys.modules["soak_checks"] = checks
_spec.loader.exec_module(checks)


def attempt(number: int, start: str, end: str | None, **extra: Any) -> dict[str, Any]:
    return {"number": number, "started_at": f"2026-01-01T10:{start}Z",
            "ended_at": f"2026-01-01T10:{end}Z" if end else None, **extra}  # fmt: skip


def run(run_id: str, status: str, *attempts: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"run_id": run_id, "status": status, "gpus": 1, "attempts": list(attempts), **extra}


def test_a_webhook_sent_twice_under_one_delivery_id_is_a_retry_and_under_two_a_double() -> None:
    runs = [run("r-1", "succeeded"), run("r-2", "stopped")]
    retried = [
        {"delivery": "d1", "run_id": "r-1", "status": "succeeded"},
        {"delivery": "d1", "run_id": "r-1", "status": "succeeded"},
        {"delivery": "d2", "run_id": "r-2", "status": "stopped"},
    ]
    held = checks.webhooks_once(runs, retried)
    assert held["held"] and held["details"]["retried_deliveries"] == 1
    doubled = [*retried, {"delivery": "d3", "run_id": "r-2", "status": "stopped"}]
    broken = checks.webhooks_once(runs, doubled)
    assert not broken["held"] and broken["details"]["doubled"] == {"r-2:stopped": ["d2", "d3"]}
    lost = checks.webhooks_once(runs, retried[:1])
    assert lost["details"]["missing"] == ["r-2:stopped"]


def test_a_log_line_lost_or_doubled_in_an_attempt_is_named_with_its_run_and_attempt() -> None:
    first = attempt(1, "00:00", "00:10", end_reason="preempted", exit_code=143)
    second = attempt(2, "00:20", "00:30", end_reason=None, exit_code=0,
                     resumed_from="/out/checkpoints/step-5")  # fmt: skip
    views = [run("r-1", "succeeded", first, second)]
    whole = {("r-1", 1): "soak step 1/8\nsoak step 2/8\nsoak step 3/8\n",
             ("r-1", 2): "[resume]\nsoak step 6/8\nsoak step 7/8\nsoak step 8/8\n"}  # fmt: skip
    assert checks.logs_exact(views, whole)["held"]
    gap = {**whole, ("r-1", 2): "soak step 6/8\nsoak step 8/8\n"}
    assert checks.logs_exact(views, gap)["details"]["wrong"] == [
        {"run_id": "r-1", "attempt": 2, "from": 6, "lost": [7], "head": [6, 8]}
    ]
    twice = {**whole, ("r-1", 1): "soak step 1/8\nsoak step 2/8\nsoak step 2/8\n"}
    assert checks.logs_exact(views, twice)["details"]["wrong"][0]["doubled"] == [2]
    short = {**whole, ("r-1", 2): "soak step 6/8\nsoak step 7/8\n"}  # succeeded, yet not at 8
    assert not checks.logs_exact(views, short)["held"]


def test_two_attempts_alive_at_once_are_caught_by_records_and_by_the_jobs_clocks() -> None:
    apart = [run("r-1", "succeeded", attempt(1, "00:00", "00:10"), attempt(2, "00:20", "00:30"))]
    stamps = {"r-1": [{"attempt": 1, "t": 1.0}, {"attempt": 1, "t": 2.0},
                      {"attempt": 2, "t": 3.0}]}  # fmt: skip
    assert checks.one_attempt_alive(apart, stamps)["held"]
    late = {"r-1": [*stamps["r-1"], {"attempt": 1, "t": 3.5}]}  # the old job still stepping
    caught = checks.one_attempt_alive(apart, late)["details"]["overlaps"]
    assert caught == [{"run_id": "r-1", "by": "job clocks", "attempts": [1, 2], "seconds": 0.5}]
    overlapping = [
        run("r-1", "succeeded", attempt(1, "00:00", "00:25"), attempt(2, "00:20", "00:30"))
    ]
    assert checks.one_attempt_alive(overlapping, {})["details"]["overlaps"][0]["by"] == "records"
    open_ended = [run("r-1", "failed", attempt(1, "00:00", None))]
    assert not checks.one_attempt_alive(open_ended, {})["held"]


def test_an_output_dataset_missing_doubled_or_partial_is_wrong_and_a_failed_run_has_none() -> None:
    data = checks.dataset_bytes("r-1")
    whole = [{"path": "rows.jsonl", "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}]
    views = [run("r-1", "succeeded"), run("r-2", "failed")]
    outputs = {"r-1": "alice/a@v1", "r-2": "alice/b@v1"}
    good = {"alice/a": [{"version": "v1", "files": whole}], "alice/b": []}
    assert checks.datasets_once(views, outputs, good)["held"]
    cut = {**good, "alice/a": [{"version": "v1", "files": [{**whole[0], "size": 10}]}]}
    assert not checks.datasets_once(views, outputs, cut)["held"]
    v1, v2 = ({"version": v, "files": whole} for v in ("v1", "v2"))
    twice = {**good, "alice/a": [v1, v2]}
    assert not checks.datasets_once(views, outputs, twice)["held"]
    from_failed = {**good, "alice/b": [{"version": "v1", "files": whole}]}
    assert checks.datasets_once(views, outputs, from_failed)["details"]["wrong"] == [
        {"run_id": "r-2", "status": "failed", "published": 1}
    ]


def test_a_pipeline_step_made_twice_or_never_is_reported() -> None:
    root = run("r-1", "succeeded", steps=[{"action": "export", "position": 1}])
    step = run("r-2", "succeeded", step={"root_run_id": "r-1", "action": "export"})
    again = run("r-3", "succeeded", step={"root_run_id": "r-1", "action": "export"})
    assert checks.steps_once([root, step], {"r-1"})["held"]
    assert checks.steps_once([root, step, again], {"r-1"})["details"]["doubled"] == {
        "r-1:export": ["r-2", "r-3"]
    }
    assert checks.steps_once([root], {"r-1"})["details"]["missing"] == ["r-1:export"]


def test_gpu_hours_off_the_attempts_by_more_than_a_second_per_gpu_do_not_hold() -> None:
    views = [run("r-1", "succeeded", attempt(1, "00:00", "06:00"))]  # 1 GPU × 6 minutes
    assert checks.gpu_hours(views, 0.1)["held"]
    assert not checks.gpu_hours(views, 0.2)["held"]


def test_a_run_left_running_is_unsettled_and_a_paused_one_with_a_checkpoint_is_resumable() -> None:
    views = [
        run("r-1", "running"),
        run("r-2", "paused", attempt(1, "00:00", "00:10", resumed_from="/c/step-5")),
        run("r-3", "succeeded"),
    ]
    got = checks.settled(views)
    assert not got["held"]
    assert [u["run_id"] for u in got["details"]["unsettled"]] == ["r-1"]
