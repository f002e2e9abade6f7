"""Factories of the lifecycle's tests: checkpoints in a run's output folder, exit and runner
records in its state folder, heartbeats, and submissions with an auto-retry limit."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from starforge.contract.api import LifecycleEvent
from starforge.server.runtime import Runtime
from starforge.server.services.runs import jobs, lifecycle
from starforge.server.services.scheduling import dispatch

from .factories import binding, report, request, run_row, schedule


def run_dir(rt: Runtime, run_id: str) -> Path:
    return dispatch.run_dir_of(rt, run_row(rt, run_id))


def checkpoint(rt: Runtime, run_id: str, name: str, *, hf: bool = False) -> Path:
    """A checkpoint under the run's out dir: ``step-N`` file, or ``checkpoint-N/`` folder."""
    folder = run_dir(rt, run_id) / "out" / "checkpoints"
    path = folder / name
    if name.startswith("checkpoint-"):
        path.mkdir(parents=True)
        (path / "model.safetensors").write_bytes(b"w")
        if hf:
            (path / "trainer_state.json").write_text('{"global_step": 1}')
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"step={name.split('-')[-1]}\n")
    return path


def exit_record(
    rt: Runtime, run_id: str, code: int, *, attempt: int = 1, rank: int = 0, age_s: float = 60.0
) -> None:
    """The record a runner writes before its final report, ``age_s`` seconds ago."""
    path = rt.storage.exit_record_path(run_dir(rt, run_id), attempt, rank)
    record = {"exit_code": code, "end_reason": None, "at": time.time() - age_s}
    path.write_text(json.dumps(record))


def runner_record(rt: Runtime, run_id: str, pid: int, *, attempt: int = 1, rank: int = 0) -> None:
    path = run_dir(rt, run_id) / "state" / f"attempt-{attempt}.node-{rank}.runner.json"
    path.write_text(json.dumps({"pid": pid, "pgid": pid}))


def beat(rt: Runtime, run_id: str, *, attempt: int = 1, rank: int = 0) -> lifecycle.Outcome:
    token = binding(rt, run_id, attempt, rank)["run_token"]
    ev = LifecycleEvent(attempt=attempt, node_rank=rank, event="heartbeat")
    return lifecycle.handle(rt, run_id, token, ev)


def submit_with_retries(rt: Runtime, max_retries: int | None, **spec_args: Any) -> str:
    req = request(rt, **spec_args).model_copy(update={"max_retries": max_retries})
    return jobs.submit(rt, "alice", req).run_id


def start(rt: Runtime, run_id: str, attempt: int = 1) -> None:
    """Place the queued run and let its runner report up to ``running``."""
    assert run_id in schedule(rt)
    report(rt, run_id, "starting", attempt=attempt)
    report(rt, run_id, "running", attempt=attempt)
