"""Attacks on the metrics ingest: bodies it must never read or keep, and tokens it must refuse."""

from __future__ import annotations

import json

import httpx
from fastapi.testclient import TestClient

from starforge.contract.api import API_PREFIX, RUN_TOKEN_HEADER
from starforge.server.services.observability import metrics
from tests.server.factories import binding, report, running_run

from . import attack
from .conftest import LIMIT, Live, runtime, wire

MB = 1024 * 1024


def _ingest(client: TestClient, run_id: str, token: str, body: bytes, **headers: str) -> object:
    return client.post(
        f"/runs/{run_id}/ingest",
        content=body,
        headers={RUN_TOKEN_HEADER: token, "Content-Type": "application/json", **headers},
    )


def _steps(n: int) -> bytes:
    return json.dumps({"steps": [{"step": i, "values": {"loss": 1.0}} for i in range(n)]}).encode()


def test_a_huge_ingest_without_a_token_is_refused_unread_and_costs_no_memory(live: Live) -> None:
    path = f"{API_PREFIX}/runs/r-0000000000/ingest"
    with httpx.Client(base_url=live.url) as http:
        assert http.get(f"{API_PREFIX}/health").status_code == 200
    attack.post(live.url, path, total=1, chunked=True)  # warm the code path once
    before = live.rss_kib()
    # Chunked: the server cannot know the size; it must refuse on the missing token alone.
    streamed = attack.post(live.url, path, total=50 * MB, chunked=True)
    # Declared: 50 MB over the ingest limit is refused from the header.
    declared = attack.post(live.url, path, total=50 * MB, headers={"Content-Type": "text/plain"})
    after = live.rss_kib()
    assert streamed.status == 401
    assert json.loads(streamed.body)["code"] == "auth.unauthorized"
    assert declared.status == 413
    assert json.loads(declared.body)["code"] == "request.too_large"
    # The server stopped taking the body: what got through is what socket buffers hold.
    assert streamed.sent < 25 * MB and declared.sent < 25 * MB
    assert after - before < 10 * 1024, f"RSS grew by {after - before} KiB"


def test_a_text_plain_ingest_is_refused_and_stores_nothing(client: TestClient) -> None:
    rt = runtime(client)
    run_id = running_run(rt)
    token = binding(rt, run_id)["job_token"]
    resp = _ingest(client, run_id, token, _steps(3), **{"Content-Type": "text/plain"})
    assert resp.status_code == 415
    assert wire(resp)["code"] == "request.unsupported_media_type"
    assert metrics.count_points(rt, run_id) == 0


def test_an_ingest_over_the_limit_is_cut_off_and_stores_nothing(client: TestClient) -> None:
    rt = runtime(client)
    run_id = running_run(rt)
    token = binding(rt, run_id)["job_token"]
    body = _steps(5000)
    assert len(body) > LIMIT
    declared = _ingest(client, run_id, token, body)
    assert declared.status_code == 413 and wire(declared)["code"] == "request.too_large"
    # Streamed without a length, the body is cut where it passes the limit.
    streamed = client.post(
        f"/runs/{run_id}/ingest",
        content=iter([body[i : i + 4096] for i in range(0, len(body), 4096)]),
        headers={RUN_TOKEN_HEADER: token, "Content-Type": "application/json"},
    )
    assert streamed.status_code == 413 and wire(streamed)["code"] == "request.too_large"
    assert metrics.count_points(rt, run_id) == 0
    assert _ingest(client, run_id, token, _steps(3)).status_code == 200  # within it: stored


def test_the_token_of_an_ended_run_ingests_nothing(client: TestClient) -> None:
    rt = runtime(client)
    run_id = running_run(rt)
    token = binding(rt, run_id)["job_token"]
    report(rt, run_id, "exited", exit_code=0)
    resp = _ingest(client, run_id, token, _steps(3))
    assert resp.status_code == 403
    assert wire(resp)["code"] == "auth.forbidden" and "ended" in wire(resp)["message"]
    assert metrics.count_points(rt, run_id) == 0


def test_another_runs_token_is_refused(client: TestClient) -> None:
    rt = runtime(client)
    mine, other = running_run(rt), running_run(rt, experiment="other")
    resp = _ingest(client, mine, binding(rt, other)["job_token"], _steps(3))
    assert resp.status_code == 403 and wire(resp)["code"] == "auth.forbidden"
    assert metrics.count_points(rt, mine) == 0


def test_a_nan_time_or_a_step_beyond_64_bits_is_a_400_naming_the_field(client: TestClient) -> None:
    rt = runtime(client)
    run_id = running_run(rt)
    token = binding(rt, run_id)["job_token"]
    cases = {
        "steps.0.t": b'{"steps": [{"step": 1, "t": NaN, "values": {"loss": 1.0}}]}',
        "steps.0.step": b'{"steps": [{"step": %d, "values": {"loss": 1.0}}]}' % 2**63,
    }
    for field, body in cases.items():
        resp = _ingest(client, run_id, token, body)
        assert resp.status_code == 400, resp.text
        err = wire(resp)
        assert err["code"] == "usage.invalid_spec"
        assert field in [e["path"] for e in err["details"]["errors"]]
    assert metrics.count_points(rt, run_id) == 0
