"""The console's action buttons come from the server: ``GET /runs/{ref}/actions`` names the actions
the API would accept from the caller now (their role and token by the authorization table, the
run's status by each action's allowed statuses), and a sweep's ``/actions`` whether it can be
stopped. The answers are checked against what the action routes themselves then do."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from starforge.contract.api import API_PREFIX
from starforge.contract.auth import Role
from starforge.contract.states import JobStatus
from starforge.server.api import authz
from starforge.server.app import create_app
from starforge.server.db.sweeps import Sweep, SweepRun
from starforge.server.runtime import Runtime
from starforge.server.services.access import users
from starforge.server.settings import load_settings
from tests.server.factories import INVENTORY, PROFILES, FakeExecutor, insert_run
from tests.server.test_authz_matrix import declared_rules

S = JobStatus
_ids = itertools.count(1)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    home: Path = tmp_path_factory.mktemp("console-actions") / "home"
    settings = load_settings(
        home, inventory=INVENTORY, profiles=PROFILES, embedded=False, isolation="none"
    )
    app = create_app(settings, executor=FakeExecutor(), run_loops=False)
    with TestClient(app) as c:
        app.state.runtime.pick_port = lambda: 40000  # no sockets in unit tests
        yield c


def runtime(client: TestClient) -> Runtime:
    return client.app.state.runtime  # type: ignore[attr-defined,no-any-return]


def user(client: TestClient, role: Role) -> tuple[str, dict[str, str]]:
    name, token = f"{role.value}-{next(_ids)}", f"token-{next(_ids)}"
    with runtime(client).transaction() as session:
        users.ensure_user(session, name, token, token_name="default")
        row = users.find(session, name)
        assert row is not None
        row.role = role.value
    return name, {"Authorization": f"Bearer {token}"}


def run_of(client: TestClient, owner: str, status: JobStatus) -> str:
    run_id = f"r-act{next(_ids):09d}"
    insert_run(runtime(client), run_id, user=owner, status=status)
    return run_id


def allowed(client: TestClient, path: str, auth: dict[str, str]) -> dict[str, object]:
    got = client.get(f"{API_PREFIX}{path}/actions", headers=auth)
    assert got.status_code == 200, got.text
    return got.json()  # type: ignore[no-any-return]


def test_a_member_is_offered_the_actions_their_runs_status_allows_and_each_is_accepted(
    client: TestClient,
) -> None:
    member, auth = user(client, Role.MEMBER)
    offered = {}
    for status in (S.QUEUED, S.PAUSED, S.FAILED, S.STOPPED, S.SUCCEEDED, S.STOPPING):
        run_id = run_of(client, member, status)
        answer = allowed(client, f"/runs/{run_id}", auth)
        assert answer["target"] == run_id and answer["refused"] == ""
        offered[status] = answer["actions"]
        for action in answer["actions"]:  # type: ignore[attr-defined]
            fresh = run_of(client, member, status)
            done = client.post(f"{API_PREFIX}/runs/{fresh}/{action}", headers=auth).json()
            assert done["accepted"], (status, action, done)
        for action in {"stop", "pause", "resume", "retry"} - set(answer["actions"]):  # type: ignore[arg-type]
            fresh = run_of(client, member, status)
            done = client.post(f"{API_PREFIX}/runs/{fresh}/{action}", headers=auth).json()
            assert not done["accepted"], (status, action, done)
    assert offered == {
        S.QUEUED: ["stop", "pause"],
        S.PAUSED: ["stop", "resume"],
        S.FAILED: ["retry"],
        S.STOPPED: ["retry"],
        S.SUCCEEDED: [],
        S.STOPPING: [],
    }


def set_role(client: TestClient, name: str, role: Role) -> None:
    with runtime(client).transaction() as session:
        row = users.find(session, name)
        assert row is not None
        row.role = role.value


def test_a_viewer_is_offered_nothing_told_why_and_refused_by_the_api(client: TestClient) -> None:
    owner, auth = user(client, Role.MEMBER)
    run_id = run_of(client, owner, S.QUEUED)
    set_role(client, owner, Role.VIEWER)  # a member made a viewer still sees their own run
    answer = allowed(client, f"/runs/{run_id}", auth)
    assert answer == {
        "target": run_id,
        "actions": [],
        "refused": f"only members, operators and admins may act on run; {owner}'s role is viewer",
    }
    refused = client.post(f"{API_PREFIX}/runs/{run_id}/stop", headers=auth)
    assert refused.status_code == 403 and refused.json()["message"] == answer["refused"]
    assert client.get(f"{API_PREFIX}/runs/{run_id}", headers=auth).json()["status"] == "queued"


def test_a_console_links_token_is_offered_nothing_and_another_users_run_is_not_found(
    client: TestClient,
) -> None:
    owner, auth = user(client, Role.MEMBER)
    run_id = run_of(client, owner, S.QUEUED)
    link = client.post(f"{API_PREFIX}/tokens/console", headers=auth).json()["token"]
    answer = allowed(client, f"/runs/{run_id}", {"Authorization": f"Bearer {link}"})
    assert answer["actions"] == [] and "a console link's token only reads" in str(answer["refused"])
    _, stranger = user(client, Role.MEMBER)
    assert client.get(f"{API_PREFIX}/runs/{run_id}/actions", headers=stranger).status_code == 404
    _, operator = user(client, Role.OPERATOR)  # operators act on everyone's runs
    assert allowed(client, f"/runs/{run_id}", operator)["actions"] == ["stop", "pause"]


def test_a_sweep_offers_stop_while_a_variant_can_still_be_stopped(client: TestClient) -> None:
    owner, auth = user(client, Role.MEMBER)
    live, ended = run_of(client, owner, S.QUEUED), run_of(client, owner, S.SUCCEEDED)
    sweep_id = f"s-act{next(_ids):06d}"
    with runtime(client).transaction() as session:
        session.add(
            Sweep(id=sweep_id, user=owner, project="proj", experiment="exp",
                  idempotency_key=sweep_id, grid={"lr": [1, 2]})
        )  # fmt: skip
        session.flush()
        for index, run_id in enumerate((live, ended)):
            session.add(SweepRun(sweep_id=sweep_id, run_id=run_id, index=index, params={}))
    assert allowed(client, f"/sweeps/{sweep_id}", auth)["actions"] == ["stop"]
    stopped = client.post(f"{API_PREFIX}/sweeps/{sweep_id}/stop", headers=auth).json()
    assert [r["accepted"] for r in stopped["results"]] == [True]
    assert allowed(client, f"/sweeps/{sweep_id}", auth)["actions"] == []


def test_the_console_asks_the_same_rule_the_action_routes_declare(client: TestClient) -> None:
    rules = declared_rules(client.app)  # type: ignore[arg-type]
    acting = [f"POST {API_PREFIX}/runs/{{ref}}/{a}" for a in ("stop", "pause", "resume", "retry")]
    acting.append(f"POST {API_PREFIX}/sweeps/{{sweep_id}}/stop")
    assert {route: rules[route] for route in acting} == {r: [authz.ACT_ON_RUN] for r in acting}
