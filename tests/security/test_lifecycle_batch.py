"""The runner's batch of lifecycle events (``POST /runs/{id}/lifecycle/batch``) is held to the
same rules as one event: only the run's own runner token, bounded in size, and every event
applied in order exactly as if it came alone."""

from __future__ import annotations

import json
from typing import Any

import httpx
from fastapi.testclient import TestClient

from starforge.contract.api import MAX_LIFECYCLE_BATCH, RUN_TOKEN_HEADER
from starforge.contract.states import JobStatus
from tests.server.factories import binding, run_row, running_run

from .conftest import runtime, wire

RUNNING = {"attempt": 1, "event": "running"}
EXITED_OK = {"attempt": 1, "event": "exited", "exit_code": 0}
EXITED_BAD = {"attempt": 1, "event": "exited", "exit_code": 3}


def _batch(client: TestClient, run_id: str, token: str, events: list[Any]) -> httpx.Response:
    return client.post(
        f"/runs/{run_id}/lifecycle/batch",
        content=json.dumps({"events": events}),
        headers={RUN_TOKEN_HEADER: token, "Content-Type": "application/json"},
    )


def test_a_jobs_token_cannot_end_its_run_with_a_batch(client: TestClient) -> None:
    rt = runtime(client)
    run_id = running_run(rt)
    resp = _batch(client, run_id, binding(rt, run_id)["job_token"], [EXITED_OK])
    assert resp.status_code == 403 and wire(resp)["code"] == "auth.forbidden"
    assert run_row(rt, run_id).status == JobStatus.RUNNING


def test_another_runs_runner_token_cannot_post_a_batch(client: TestClient) -> None:
    rt = runtime(client)
    mine, other = running_run(rt), running_run(rt)
    resp = _batch(client, other, binding(rt, mine)["run_token"], [EXITED_OK])
    assert resp.status_code == 403
    assert run_row(rt, other).status == JobStatus.RUNNING


def test_an_empty_or_oversized_batch_is_refused_and_changes_nothing(client: TestClient) -> None:
    rt = runtime(client)
    run_id = running_run(rt)
    token = binding(rt, run_id)["run_token"]
    for events in ([], [RUNNING] * MAX_LIFECYCLE_BATCH + [EXITED_OK]):
        resp = _batch(client, run_id, token, events)
        assert resp.status_code == 400, resp.text
        assert wire(resp)["code"] == "usage.invalid_spec"
    assert run_row(rt, run_id).status == JobStatus.RUNNING


def test_events_apply_in_order_and_none_after_the_end_counts(client: TestClient) -> None:
    rt = runtime(client)
    run_id = running_run(rt)
    token = binding(rt, run_id)["run_token"]
    resp = _batch(client, run_id, token, [RUNNING, EXITED_OK, EXITED_BAD])
    assert resp.status_code == 200, resp.text
    acks = [a["accepted"] for a in resp.json()["acks"]]
    assert len(acks) == 3 and acks[1:] == [True, False]  # the exit counts, a second one does not
    run = run_row(rt, run_id)
    assert (run.status, run.exit_code) == (JobStatus.SUCCEEDED, 0)
