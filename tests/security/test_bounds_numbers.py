"""Numbers beyond what the server stores are a 400 naming the field, never an overflow inside."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from starforge.contract.api import RUN_TOKEN_HEADER
from starforge.contract.states import JobStatus
from tests.server.factories import binding, request, run_row, running_run

from .conftest import ALICE, ROOT, runtime, wire

HUGE = 2**64 + 1


def _paths(resp: Any) -> list[str]:
    err = wire(resp)
    assert resp.status_code == 400 and err["code"] == "usage.invalid_spec", resp.text
    return [e["path"] for e in err["details"]["errors"]]


@pytest.mark.parametrize(
    ("update", "field"),
    [
        ({"max_gpus": HUGE}, "max_gpus"),
        ({"max_runs": HUGE}, "max_runs"),
        ({"priority": HUGE}, "priority"),
        ({"priority": -HUGE}, "priority"),
        ({"max_gpus_per_series": {"h200": HUGE}}, "max_gpus_per_series.h200"),
        ({"allowed_profiles": ["h200:" + "9" * 5000]}, "allowed_profiles.0"),
    ],
)
def test_a_quota_beyond_its_range_is_refused_and_changes_nothing(
    client: TestClient, update: dict[str, Any], field: str
) -> None:
    resp = client.put("/admin/quotas/bob", json=update, headers=ROOT)
    assert field in _paths(resp)
    quota = client.get("/admin/quotas/bob", headers=ROOT).json()
    assert quota["default"] is True  # nothing was stored for bob


def test_an_exit_code_beyond_its_range_is_refused_and_the_run_keeps_running(
    client: TestClient,
) -> None:
    rt = runtime(client)
    run_id = running_run(rt)
    token = binding(rt, run_id)["run_token"]
    for code in (HUGE, 256, -HUGE):
        resp = client.post(
            f"/runs/{run_id}/lifecycle",
            json={"attempt": 1, "event": "exited", "exit_code": code},
            headers={RUN_TOKEN_HEADER: token},
        )
        assert "exit_code" in _paths(resp)
    resp = client.post(
        f"/runs/{run_id}/lifecycle",
        json={"attempt": HUGE, "event": "heartbeat"},
        headers={RUN_TOKEN_HEADER: token},
    )
    assert "attempt" in _paths(resp)
    assert run_row(rt, run_id).status == JobStatus.RUNNING


@pytest.mark.parametrize("profile", ["h200:" + "9" * 5000, "h200:" + "9" * 100])
def test_a_huge_profile_is_refused_and_no_run_is_made(client: TestClient, profile: str) -> None:
    body = request(runtime(client)).model_dump(mode="json")
    body["spec"]["profiles"] = [profile]
    assert "spec.profiles.0" in _paths(client.post("/jobs", json=body, headers=ALICE))
    assert client.get("/runs", headers=ALICE).json()["runs"] == []


def test_a_non_finite_hyperparameter_is_refused_and_no_run_is_made(client: TestClient) -> None:
    body = json.dumps(request(runtime(client)).model_dump(mode="json"))
    body = body.replace('"hyperparams": {}', '"hyperparams": {"optim": {"lr": NaN}}')
    resp = client.post("/jobs", content=body, headers={**ALICE, "Content-Type": "application/json"})
    assert "spec.hyperparams" in _paths(resp)
    assert "optim.lr" in wire(resp)["message"]
    assert client.get("/runs", headers=ALICE).json()["runs"] == []


def test_non_finite_reported_hyperparameters_are_refused_and_nothing_is_kept(
    client: TestClient,
) -> None:
    rt = runtime(client)
    run_id = running_run(rt)
    token = binding(rt, run_id)["run_token"]
    resp = client.post(
        f"/runs/{run_id}/ingest",
        content=b'{"hparams": {"lr": Infinity}, "meta": {"ok": 1}}',
        headers={RUN_TOKEN_HEADER: token, "Content-Type": "application/json"},
    )
    assert "hparams" in _paths(resp)
    assert client.get(f"/runs/{run_id}/meta", headers=ALICE).json()["meta"] == {}
