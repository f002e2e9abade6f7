"""The resource endpoints over HTTP (FastAPI's TestClient, no sockets): cluster status, my usage,
admin quotas (partial updates, 403 for non-admins), and why-pending on the run's view."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from starforge.contract.api import API_PREFIX, ClusterStatus, MyUsage, RunView, UserQuota
from starforge.server.app import create_app
from starforge.server.runtime import Runtime
from starforge.server.services.access import users
from starforge.server.services.scheduling import dispatch
from starforge.server.settings import Settings

from .factories import TOKENS, FakeExecutor, request

ALICE = {"Authorization": f"Bearer {TOKENS['alice']}"}
BOB = {"Authorization": f"Bearer {TOKENS['bob']}"}


@pytest.fixture
def client(settings: Settings, executor: FakeExecutor) -> Iterator[TestClient]:
    app = create_app(
        settings.model_copy(update={"embedded": False}), executor=executor, run_loops=False
    )
    with TestClient(app, base_url="http://testserver" + API_PREFIX) as c:
        rt: Runtime = app.state.runtime
        rt.pick_port = lambda: 40000  # no sockets in unit tests
        with rt.transaction() as session:
            for name, token in TOKENS.items():
                users.ensure_user(session, name, token)
            users.make_admin(session, "alice")
        yield c


def runtime(client: TestClient) -> Runtime:
    return client.app.state.runtime  # type: ignore[attr-defined,no-any-return]


def submit(client: TestClient, headers: dict[str, str], profiles: list[str]) -> str:
    body = request(runtime(client), profiles=profiles).model_dump(mode="json")
    resp = client.post("/jobs", json=body, headers=headers)
    assert resp.status_code == 201, resp.text
    return str(resp.json()["run_id"])


def place_and_start(client: TestClient) -> None:
    rt = runtime(client)
    for order in dispatch.schedule_pass(rt):
        dispatch.start_attempt(rt, order)


def test_cluster_status_shows_profiles_and_capacity_per_series(client: TestClient) -> None:
    submit(client, BOB, ["h200:16"])
    place_and_start(client)
    got = ClusterStatus.model_validate(client.get("/cluster/status", headers=BOB).json())
    assert [p.name for p in got.profiles][:2] == ["h200", "h100"]
    assert {s.series: (s.total, s.used, s.free) for s in got.series} == {
        "h200": (16, 16, 0),
        "h100": (8, 0, 8),
    }
    assert client.get("/cluster/status").status_code == 401


def test_my_usage_lists_my_quota_my_active_runs_and_my_queued_runs(client: TestClient) -> None:
    active = submit(client, BOB, ["h200:16"])
    place_and_start(client)
    waiting = submit(client, BOB, ["h200:8"])
    got = MyUsage.model_validate(client.get("/usage/mine", headers=BOB).json())
    assert (got.user, got.role, got.default) == ("bob", "member", True)
    assert got.usage.gpus_by_series == {"h200": 16} and got.usage.queued == 1
    assert [r.run_id for r in got.active] == [active]
    assert [(r.run_id, r.queue_position) for r in got.queued_runs] == [(waiting, 1)]


def test_admins_set_quotas_in_part_and_others_are_forbidden(client: TestClient) -> None:
    resp = client.put("/admin/quotas/bob", json={"max_gpus": 8}, headers=BOB)
    assert resp.status_code == 403 and resp.json()["code"] == "auth.forbidden"
    refused = resp.json()
    assert refused["message"] == "only admins may change quotas; bob's role is member"
    assert refused["hint"] == "`sf status` shows your own quota and usage"
    listing = client.get("/admin/quotas", headers=BOB).json()["message"]
    assert listing == "only admins may list quotas; bob's role is member"
    resp = client.put(
        "/admin/quotas/bob",
        json={"max_gpus": 8, "max_gpus_per_series": {"h200": 4}, "allowed_profiles": ["h200"]},
        headers=ALICE,
    )
    assert resp.status_code == 200, resp.text
    resp = client.put("/admin/quotas/bob", json={"max_gpus": None}, headers=ALICE)
    got = UserQuota.model_validate(resp.json())
    assert (got.quota.max_gpus, got.quota.max_gpus_per_series) == (None, {"h200": 4})
    assert got.quota.allowed_profiles == ["h200"] and not got.default
    listed = client.get("/admin/quotas", headers=ALICE).json()["users"]
    assert [(u["user"], u["role"], u["default"]) for u in listed] == [
        ("alice", "admin", True),
        ("bob", "member", False),
    ]
    missing = client.put("/admin/quotas/nobody", json={"max_runs": 1}, headers=ALICE)
    assert (missing.status_code, missing.json()["code"]) == (404, "users.not_found")
    typo = client.put("/admin/quotas/bob", json={"max_gpu": 1}, headers=ALICE)
    assert typo.status_code == 400 and "max_gpu" in typo.json()["message"]


def test_a_submission_the_quota_can_never_allow_is_rejected_on_the_wire(
    client: TestClient,
) -> None:
    client.put("/admin/quotas/bob", json={"allowed_profiles": ["h200"]}, headers=ALICE)
    body = request(runtime(client), profiles=["h100:8"]).model_dump(mode="json")
    resp = client.post("/jobs", json=body, headers=BOB)
    assert (resp.status_code, resp.json()["code"]) == (422, "admission.quota")
    assert "does not allow profile h100" in resp.json()["message"]


def test_a_queued_runs_view_carries_its_position_and_why_it_waits(client: TestClient) -> None:
    holder = submit(client, ALICE, ["h200:16"])
    place_and_start(client)
    waiting = submit(client, BOB, ["h200:8"])
    place_and_start(client)  # the scheduler's pass explains the queue; views read it
    view = RunView.model_validate(client.get(f"/runs/{waiting}", headers=BOB).json())
    assert view.queue_position == 1 and view.pending is not None
    # alice's run is named to bob as "another user's run": the numbers, not her run's id
    assert view.pending.next_event == "when another user's run ends"
    assert holder not in client.get(f"/runs/{waiting}", headers=BOB).text
    assert view.reason == view.pending.message
    listed = client.get("/runs", headers=BOB).json()["runs"]
    assert [(r["run_id"], r["queue_position"]) for r in listed] == [(waiting, 1)]
