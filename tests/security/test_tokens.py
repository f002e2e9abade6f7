"""Two tokens per attempt: the runner's posts lifecycle events, the job's (its STARFORGE_TOKEN)
ingests metrics into its own run. What a job holds cannot end its run, and what the runner holds
is never in the job's environment."""

from __future__ import annotations

import json

import httpx
from fastapi.testclient import TestClient

from starforge.contract.api import RUN_TOKEN_HEADER
from starforge.contract.env import Binding, job_env
from starforge.contract.jobspec import JobSpec
from starforge.contract.states import JobStatus
from starforge.server.services.access.users import token_digest
from starforge.server.services.observability import metrics
from starforge.server.services.scheduling import dispatch
from tests.server.factories import FakeExecutor, binding, member, run_row, running_run

from .conftest import runtime, wire

EXITED_OK = {"attempt": 1, "node_rank": 0, "event": "exited", "exit_code": 0}
POINT = {"attempt": 1, "steps": [{"step": 0, "values": {"loss": 1.0}}]}


def _post(client: TestClient, run_id: str, route: str, token: str, body: dict) -> httpx.Response:
    return client.post(
        f"/runs/{run_id}/{route}",
        content=json.dumps(body),
        headers={RUN_TOKEN_HEADER: token, "Content-Type": "application/json"},
    )


def test_the_jobs_token_cannot_report_its_run_finished_while_it_runs(client: TestClient) -> None:
    rt = runtime(client)
    run_id = running_run(rt)
    job_token = binding(rt, run_id)["job_token"]
    resp = _post(client, run_id, "lifecycle", job_token, EXITED_OK)
    assert resp.status_code == 403
    assert wire(resp)["code"] == "auth.forbidden"
    run = run_row(rt, run_id)
    assert run.status == JobStatus.RUNNING and run.exit_code is None
    assert isinstance(rt.executor, FakeExecutor)
    assert rt.executor.stopped == []  # nothing was stopped either


def test_the_runners_token_ingests_nothing(client: TestClient) -> None:
    rt = runtime(client)
    run_id = running_run(rt)
    resp = _post(client, run_id, "ingest", binding(rt, run_id)["run_token"], POINT)
    assert resp.status_code == 403
    assert metrics.series(rt, member("alice"), run_id, max_points=10).series == []


def test_each_token_does_its_own_job(client: TestClient) -> None:
    rt = runtime(client)
    run_id = running_run(rt)
    tokens = binding(rt, run_id)
    assert _post(client, run_id, "ingest", tokens["job_token"], POINT).json() == {
        "stored": 1,
        "dropped": 0,
    }
    assert _post(client, run_id, "lifecycle", tokens["run_token"], EXITED_OK).json()["accepted"]
    assert run_row(rt, run_id).status == JobStatus.SUCCEEDED


def test_the_two_tokens_differ_and_only_their_digests_are_stored(client: TestClient) -> None:
    rt = runtime(client)
    run_id = running_run(rt)
    tokens = binding(rt, run_id)
    run = run_row(rt, run_id)
    assert tokens["job_token"] != tokens["run_token"]
    assert run.job_token_sha256 == token_digest(tokens["job_token"])
    assert run.run_token_sha256 == token_digest(tokens["run_token"])
    stored = json.dumps({c.name: getattr(run, c.name) for c in run.__table__.columns}, default=str)
    assert tokens["job_token"] not in stored and tokens["run_token"] not in stored


def test_the_job_environment_carries_the_jobs_token_and_never_the_runners(
    client: TestClient,
) -> None:
    rt = runtime(client)
    run_id = running_run(rt)
    written = Binding.model_validate(binding(rt, run_id))
    run_dir = dispatch.run_dir_of(rt, run_row(rt, run_id))
    spec = JobSpec.model_validate(json.loads(rt.storage.run_json_path(run_dir).read_text())["spec"])
    env = job_env(spec, written)
    assert env["STARFORGE_TOKEN"] == written.job_token
    assert written.run_token not in env.values()
    binding_file = rt.storage.binding_path(run_dir, 1, 0)
    assert binding_file.stat().st_mode & 0o077 == 0  # the runner's token: owner only


def test_once_its_run_has_ended_the_job_token_ingests_nothing(
    client: TestClient,
) -> None:
    rt = runtime(client)
    run_id = running_run(rt)
    old = binding(rt, run_id)
    ended = _post(client, run_id, "lifecycle", old["run_token"], {**EXITED_OK, "exit_code": 1})
    assert ended.json()["accepted"]
    assert run_row(rt, run_id).status == JobStatus.FAILED
    resp = _post(client, run_id, "ingest", old["job_token"], POINT)
    assert resp.status_code == 403  # the run ended
    assert metrics.series(rt, member("alice"), run_id, max_points=10).series == []
