"""Metrics on the control plane: ingest by run token, last write wins, queries, downsampling."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import strategies as st

from starforge.contract.api import (
    API_PREFIX,
    RUN_TOKEN_HEADER,
    IngestRequest,
    MetricStep,
)
from starforge.contract.errors import Forbidden, RunNotFound, Unauthorized
from starforge.server.app import create_app
from starforge.server.runtime import Runtime
from starforge.server.services.access import users
from starforge.server.services.observability import metrics
from starforge.server.settings import Settings

from .factories import TOKENS, FakeExecutor, binding, member, running_run


def batch(*steps: tuple[int, dict[str, float]], **extra: object) -> IngestRequest:
    return IngestRequest(
        steps=[MetricStep(step=s, t=1000.0 + s, values=v) for s, v in steps],
        **extra,  # type: ignore[arg-type]
    )


def token_of(rt: Runtime, run_id: str) -> str:
    return str(binding(rt, run_id)["job_token"])


def stored(rt: Runtime, run_id: str, user: str = "alice") -> dict[str, list[tuple[int, float]]]:
    view = metrics.series(rt, member(user), run_id, max_points=100_000)
    return {s.key: list(zip(s.steps, s.values, strict=True)) for s in view.series}


def test_points_are_stored_by_key_and_step_and_the_last_write_wins(rt: Runtime) -> None:
    run_id = running_run(rt)
    token = token_of(rt, run_id)
    ack = metrics.ingest(rt, run_id, token, batch((0, {"loss": 3.0}), (1, {"loss": 2.0})))
    assert (ack.stored, ack.dropped) == (2, 0)
    # A resumed attempt re-logs step 1; within one batch the later value of a step wins too.
    metrics.ingest(rt, run_id, token, batch((1, {"loss": 2.5}), (1, {"loss": 2.4}), (2, {})))
    assert stored(rt, run_id) == {"loss": [(0, 3.0), (1, 2.4)]}
    assert metrics.count_points(rt, run_id) == 2


def test_non_finite_values_and_bad_keys_are_dropped_and_counted(rt: Runtime) -> None:
    run_id = running_run(rt)
    body = batch((0, {"ok": 1.0, "nan": math.nan, "": 1.0, "k" * 201: 1.0, "inf": -math.inf}))
    ack = metrics.ingest(rt, run_id, token_of(rt, run_id), body)
    assert (ack.stored, ack.dropped) == (1, 4)
    assert stored(rt, run_id) == {"ok": [(0, 1.0)]}


def test_a_job_can_write_only_to_its_own_run(rt: Runtime) -> None:
    mine, other = running_run(rt), running_run(rt, profiles=["h100:8"])
    with pytest.raises(Unauthorized):
        metrics.ingest(rt, mine, None, batch((0, {"loss": 1.0})))
    with pytest.raises(Forbidden) as err:
        metrics.ingest(rt, mine, token_of(rt, other), batch((0, {"loss": 1.0})))
    assert "not valid for run" in err.value.message
    with pytest.raises(RunNotFound):
        metrics.ingest(rt, "r-doesnotexi", token_of(rt, mine), batch())
    assert stored(rt, mine) == {}


def test_queries_name_keys_and_see_only_the_users_runs(rt: Runtime) -> None:
    run_id = running_run(rt)
    metrics.ingest(
        rt, run_id, token_of(rt, run_id), batch((0, {"loss": 1.0, "reward": 0.0, "lr": 0.1}))
    )
    view = metrics.series(rt, member("alice"), run_id[:6], keys=["reward", "loss", "missing"])
    assert view.keys == ["loss", "lr", "reward"]  # every key the run has
    assert [s.key for s in view.series] == ["reward", "loss"]
    with pytest.raises(RunNotFound):
        metrics.series(rt, member("bob"), run_id)


def test_hyperparameters_and_metadata_merge_and_progress_shows_the_last_step(
    rt: Runtime,
) -> None:
    run_id = running_run(rt)
    token = token_of(rt, run_id)
    metrics.ingest(rt, run_id, token, batch((4, {"loss": 1.0}), hparams={"lr": 0.1, "bs": 8}))
    metrics.ingest(rt, run_id, token, batch((2, {"loss": 1.0}), hparams={"lr": 0.2}, meta={"a": 1}))
    meta = metrics.meta(rt, member("alice"), run_id)
    assert (meta.hparams, meta.meta, meta.last_step) == ({"lr": 0.2, "bs": 8}, {"a": 1}, 4)
    progress = metrics.progress(rt, member("alice"), [run_id, "r-unknownrun"]).runs
    assert [(p.run_id, p.last_step) for p in progress] == [(run_id, 4)]
    assert metrics.progress(rt, member("bob"), [run_id]).runs == []


def test_a_long_series_is_downsampled_keeping_its_ends_and_extremes(rt: Runtime) -> None:
    run_id = running_run(rt)
    values = {s: math.sin(s / 50) for s in range(5000)}
    values[1234] = 50.0  # a spike must survive
    steps = [MetricStep(step=s, values={"x": v}) for s, v in values.items()]
    metrics.ingest(rt, run_id, token_of(rt, run_id), IngestRequest(steps=steps))
    (s,) = metrics.series(rt, member("alice"), run_id, max_points=200).series
    assert s.count == 5000 and s.downsampled and len(s.steps) <= 200
    assert (s.steps[0], s.steps[-1], s.last_step) == (0, 4999, 4999)
    assert max(s.values) == 50.0 and min(s.values) == min(values.values())
    assert s.steps == sorted(s.steps)


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=400), st.integers(2, 50))
def test_downsampling_keeps_at_most_the_limit_and_the_true_range(
    values: list[float], limit: int
) -> None:
    steps = list(range(len(values)))
    got_steps, got_values = metrics.downsample(steps, values, limit)
    assert len(got_steps) == len(got_values) <= limit
    assert got_steps == sorted(set(got_steps))
    if values and limit >= 4:
        assert (got_steps[0], got_steps[-1]) == (0, len(values) - 1)
        assert (min(got_values), max(got_values)) == (min(values), max(values))


# ---- over HTTP (TestClient, no socket) ----------------------------------------------------------


@pytest.fixture
def client(settings: Settings, executor: FakeExecutor) -> Iterator[TestClient]:
    app = create_app(
        settings.model_copy(update={"embedded": False}), executor=executor, run_loops=False
    )
    with TestClient(app, base_url="http://testserver" + API_PREFIX) as c:
        rt: Runtime = app.state.runtime
        rt.pick_port = lambda: 40000
        with rt.transaction() as session:
            for name, token in TOKENS.items():
                users.ensure_user(session, name, token)
        yield c


def test_the_ingest_endpoint_takes_the_run_token_and_queries_take_the_users(
    client: TestClient,
) -> None:
    rt: Runtime = client.app.state.runtime  # type: ignore[attr-defined]
    run_id = running_run(rt)
    body = batch((0, {"loss": 1.0}), (1, {"loss": 0.5})).model_dump_json()
    headers = {RUN_TOKEN_HEADER: token_of(rt, run_id), "Content-Type": "application/json"}
    assert client.post(f"/runs/{run_id}/ingest", content=body, headers=headers).json() == {
        "stored": 2,
        "dropped": 0,
    }
    bad = client.post(
        f"/runs/{run_id}/ingest", content=b'{"steps": [{"step": -1}]}', headers=headers
    )
    assert bad.status_code == 400 and bad.json()["code"] == "usage.invalid_spec"
    alice = {"Authorization": f"Bearer {TOKENS['alice']}"}
    got = client.get(f"/runs/{run_id}/metrics", params={"key": "loss"}, headers=alice).json()
    assert got["series"][0]["values"] == [1.0, 0.5]
    assert client.get(f"/runs/{run_id}/meta", headers=alice).json()["last_step"] == 1
    assert client.get(f"/runs/{run_id}/metrics").status_code == 401
