"""The authorization table, walked: every route of the app × every role × the caller's own run and
another user's run, each cell checked against the route's declared rule.

A route that declares no rule fails here, so a new endpoint cannot ship unguarded. The expected
answer of a cell follows from the rule alone (:func:`expected`): no token → 401 for user routes;
a role below the rule's → 403; another user's run for a viewer or member → 404 (no existence
leak); otherwise the call goes through (2xx). Each cell gets fresh users and runs, so an action in
one cell (a stop, a revoked token, a disabled user) cannot change the answer of another.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from starforge.contract.api import API_PREFIX
from starforge.contract.auth import Role
from starforge.contract.datasets import DatasetPush
from starforge.contract.states import JobStatus
from starforge.server.api.authz import ADMIN_RULES, On, Rule, Who
from starforge.server.api.deps import UserDep
from starforge.server.app import create_app
from starforge.server.db.sweeps import Sweep, SweepRun
from starforge.server.runtime import Runtime
from starforge.server.services.access import users
from starforge.server.services.data import blobs, datasets
from starforge.server.settings import Settings, load_settings

from .factories import INVENTORY, PROFILES, FakeExecutor, insert_run, request, running_run

# Routes FastAPI and Starlette add by themselves: the API's schema and docs, the console's files.
BUILT_IN = {"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc", "/console/static"}
BLOB = b"matrix"
ROLES: list[Role | None] = [None, *Role]  # None: no token at all
_ids = itertools.count(1)


def api_routes(app: FastAPI) -> Iterator[tuple[set[str], str, Any]]:
    """(methods, path, dependant) of every API route, also inside included routers (FastAPI
    0.16x keeps an included router as one lazily expanded entry of ``app.routes``)."""
    for route in app.routes:
        if isinstance(route, APIRoute):
            yield route.methods, route.path, route.dependant
        elif hasattr(route, "effective_route_contexts"):
            for ctx in route.effective_route_contexts():
                yield ctx.methods, ctx.path_format, ctx.dependant


def declared_rules(app: FastAPI) -> dict[str, list[Rule]]:
    """``"METHOD /path"`` → the rules its dependencies declare, for every API route."""
    found: dict[str, list[Rule]] = {}
    for methods, path, dependant in api_routes(app):
        rules: list[Rule] = []
        stack = [dependant]
        while stack:
            dep = stack.pop()
            rule = getattr(dep.call, "authz_rule", None)
            if rule is not None:
                rules.append(rule)
            stack.extend(dep.dependencies)
        for method in sorted(methods):
            found[f"{method} {path}"] = rules
    return found


def expected(rule: Rule, role: Role | None, whose: str) -> int | None:
    """The status a cell must answer; None: the call goes through (a 2xx)."""
    if rule.who is Who.ANYONE:
        return None
    if rule.who is Who.RUNNER:
        return 401  # a user's token is never a run token
    if role is None:
        return 401
    assert rule.role is not None
    if not role.at_least(rule.role):
        return 403
    if rule.on is On.RUN and whose == "other" and not role.at_least(Role.OPERATOR):
        return 404
    return None


@dataclass
class Cell:
    caller: str
    token: str | None
    run_id: str  # the run the path names: the caller's own or another user's
    other: str  # another user, for routes that name a user


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    home = tmp_path_factory.mktemp("authz") / "home"
    return load_settings(
        home,
        inventory=INVENTORY,
        profiles=PROFILES,
        url="http://127.0.0.1:9999",
        embedded=False,
        isolation="none",  # fake jobs share the server's identity (services/access/isolation.py)
    )


@pytest.fixture(scope="module")
def client(settings: Settings) -> Iterator[TestClient]:
    app = create_app(settings, executor=FakeExecutor(), run_loops=False)
    with TestClient(app) as c:
        app.state.runtime.pick_port = lambda: 40000  # no sockets in unit tests
        yield c


def _user(rt: Runtime, role: Role) -> tuple[str, str]:
    name, token = f"{role.value}-{next(_ids)}", f"token-{next(_ids)}"
    with rt.transaction() as session:
        users.ensure_user(session, name, token, token_name="default")
        row = users.find(session, name)
        assert row is not None
        row.role = role.value
    return name, token


def _run(rt: Runtime, owner: str) -> str:
    run_id = f"r-{next(_ids):012x}"
    insert_run(rt, run_id, user=owner, status=JobStatus.STOPPED)
    with rt.transaction() as session:  # and a sweep of the same owner (its one variant)
        session.add(
            Sweep(
                id=sweep_of(run_id),
                user=owner,
                project="proj",
                experiment="exp",
                idempotency_key=run_id,
                grid={},
            )
        )
        session.flush()
        session.add(SweepRun(sweep_id=sweep_of(run_id), run_id=run_id, index=0, params={}))
    return run_id


def sweep_of(run_id: str) -> str:
    return "s-" + run_id[-10:]


def new_cell(rt: Runtime, role: Role | None, whose: str) -> Cell:
    caller, token = _user(rt, role or Role.ADMIN)
    other, _ = _user(rt, Role.MEMBER)
    return Cell(
        caller=caller,
        token=token if role is not None else None,
        run_id=_run(rt, caller if whose == "own" else other),
        other=other,
    )


def call(client: TestClient, method: str, path: str, cell: Cell, submit: dict[str, Any]) -> int:
    return send(client, method, path, cell, submit).status_code


def call_json(
    client: TestClient, method: str, path: str, cell: Cell, submit: dict[str, Any]
) -> dict[str, Any]:
    answer: dict[str, Any] = send(client, method, path, cell, submit).json()
    return answer


def send(client: TestClient, method: str, path: str, cell: Cell, submit: dict[str, Any]) -> Any:
    digest = hashlib.sha256(BLOB).hexdigest()
    ref = "default" if path.startswith(f"{API_PREFIX}/tokens/") else cell.run_id
    url = path.format(
        ref=ref, run_id=cell.run_id, sha256=digest, name=cell.other, framework="trl",
        sweep_id=sweep_of(cell.run_id), owner=cell.caller, dataset="matrix", version="v1",
        host="registry.example",
    )  # fmt: skip
    matrix_dataset = {"name": "matrix", "version": "v1", "files": submit["manifest"]["files"][:1]}
    if "/datasets/" in path:  # the caller's own dataset, whatever the caller's role
        rt: Runtime = client.app.state.runtime  # type: ignore[attr-defined]
        datasets.push(rt, cell.caller, DatasetPush.model_validate(matrix_dataset))
    bodies: dict[str, dict[str, Any]] = {
        "POST /jobs": {**submit, "idempotency_key": f"key-{next(_ids):08d}"},
        "POST /blobs/missing": {"digests": [digest]},
        "POST /sweeps": {**submit, "variants": [{}], "idempotency_key": f"key-{next(_ids):08d}"},
        "PUT /admin/quotas/{name}": {"max_runs": 2},
        "PUT /admin/images/defaults/{framework}": {"ref": "ghcr.io/lab/trl:1"},
        "PUT /admin/registries": {"entry": "ghcr.io/lab", "allowed": True},
        "PUT /admin/registry-logins/{host}": {"username": "u", "password": "matrix-pw"},
        "POST /runs/{run_id}/registry-auth": {"attempt": 1},
        "POST /users": {"name": f"new-{next(_ids)}", "role": "member"},
        "PUT /users/{name}/role": {"role": "viewer"},
        "PUT /users/{name}/unix": {"unix_user": None},
        "POST /tokens": {},
        "POST /runs/{run_id}/lifecycle": {"attempt": 1, "event": "running"},
        "POST /runs/{run_id}/lifecycle/batch": {"events": [{"attempt": 1, "event": "running"}]},
        "POST /runs/{run_id}/ingest": {},
        "POST /secrets": {"name": "HF_TOKEN", "value": "matrix-value"},
        "POST /runs/{run_id}/secrets": {"attempt": 1},
        "PUT /admin/usage/quotas/{name}": {"gpu_hours": 10},
        "POST /admin/maintenance/drain": {"note": "matrix"},
        "POST /notify/endpoints": {"url": "https://93.184.216.34/hook"},
        "POST /runs/{ref}/export": {"idempotency_key": f"key-{next(_ids):08d}"},
        "POST /runs/{ref}/rerun": {"idempotency_key": f"key-{next(_ids):08d}"},
        "POST /datasets": matrix_dataset,
        "PUT /datasets/{owner}/{dataset}/visibility": {"public": True},
    }
    key = f"{method} {path.removeprefix(API_PREFIX)}"
    headers = {"Authorization": f"Bearer {cell.token}"} if cell.token else {}
    params: dict[str, Any] = {"runs": cell.run_id} if key == "GET /progress" else {}
    if key == "GET /runs-diff":  # the cell's run compared with itself: two runs named
        params = {"run": [cell.run_id, cell.run_id]}
    if key.startswith("PUT /blobs/"):
        return client.put(url, content=BLOB, headers=headers)
    return client.request(method, url, json=bodies.get(key), headers=headers, params=params)


def test_every_route_declares_exactly_one_authorization_rule(client: TestClient) -> None:
    app: FastAPI = client.app  # type: ignore[assignment]
    unguarded = [route for route, rules in declared_rules(app).items() if len(rules) != 1]
    assert unguarded == [], f"routes without exactly one authz rule: {unguarded}"
    assert len(declared_rules(app)) > 30  # the walk reached the included routers
    others = [
        getattr(r, "path", repr(r))
        for r in app.routes
        if not isinstance(r, APIRoute)
        and not hasattr(r, "effective_route_contexts")
        and getattr(r, "path", None) not in BUILT_IN
    ]
    assert others == [], f"routes outside the table: {others}"


def test_a_route_that_only_asks_for_a_user_is_reported_as_unguarded(settings: Settings) -> None:
    app = create_app(settings, executor=FakeExecutor(), run_loops=False)

    @app.get(f"{API_PREFIX}/new-endpoint")
    def new_endpoint(user: UserDep) -> dict[str, str]:
        return {"user": user.name}

    assert declared_rules(app)[f"GET {API_PREFIX}/new-endpoint"] == []


# Routes whose service refuses the matrix's bare runs (no method that exports, no checkpoint, no
# spec to rerun): their rejection (422) comes after authorization, so it proves the call went
# through.
REJECTED_ON_BARE_RUNS = ("/runs/{ref}/export", "/runs/{ref}/rerun")


def test_each_cell_of_routes_roles_and_owners_answers_as_its_rule_says(client: TestClient) -> None:
    app: FastAPI = client.app  # type: ignore[assignment]
    rt: Runtime = app.state.runtime
    submitted = request(rt)
    submit = submitted.model_dump(mode="json")
    wrong: list[str] = []
    cells = 0
    for route, (rule,) in sorted(declared_rules(app).items()):
        method, path = route.split(" ", 1)
        if path.endswith("/logs/stream"):
            path += "?tail=0"  # the run has ended: the stream says so and closes
        for role, whose in itertools.product(ROLES, ("own", "other")):
            if whose == "other" and rule.on is not On.RUN:
                continue
            cell = new_cell(rt, role, whose)
            for digest in submitted.manifest.digests():  # as if the caller uploaded its package
                blobs.record(rt, cell.caller, digest)
            got, want = call(client, method, path, cell, submit), expected(rule, role, whose)
            cells += 1
            through = 200 <= got < 300 or (route.endswith(REJECTED_ON_BARE_RUNS) and got == 422)
            ok = through if want is None else got == want
            if not ok:
                who = role.value if role else "anonymous"
                wrong.append(f"{route} as {who} on {whose} run: {got}, want {want or '2xx'}")
    assert wrong == [], "\n".join(wrong)
    assert cells > 100  # the walk did reach the whole table


def test_each_admin_route_refuses_an_operator_naming_its_own_action_and_the_admin_role(
    client: TestClient,
) -> None:
    app: FastAPI = client.app  # type: ignore[assignment]
    rt: Runtime = app.state.runtime
    submit = request(rt).model_dump(mode="json")
    admin_routes = {
        route: rule
        for route, (rule,) in declared_rules(app).items()
        if rule.who is Who.USER and rule.role is Role.ADMIN
    }
    assert len(admin_routes) >= 15  # users, quotas, usage, maintenance, images, registries
    assert set(admin_routes.values()) == set(ADMIN_RULES)  # every admin action has its route
    wrong = []
    for route, rule in sorted(admin_routes.items()):
        method, path = route.split(" ", 1)
        cell = new_cell(rt, Role.OPERATOR, "own")
        got = call_json(client, method, path, cell, submit)
        want = f"only admins may {rule.action}; {cell.caller}'s role is operator"
        if got.get("message") != want or got.get("details", {}).get("needs") != "admin":
            wrong.append(f"{route}: {got}")
    assert wrong == [], "\n".join(wrong)


def test_an_operator_sees_the_whole_queue_and_a_member_only_their_own(client: TestClient) -> None:
    rt: Runtime = client.app.state.runtime  # type: ignore[attr-defined]
    operator, op_token = _user(rt, Role.OPERATOR)
    member, member_token = _user(rt, Role.MEMBER)
    mine, theirs = _run(rt, member), _run(rt, operator)

    def listed(token: str) -> set[str]:
        resp = client.get(
            f"{API_PREFIX}/runs",
            params={"limit": 1000},
            headers={"Authorization": f"Bearer {token}"},
        )
        return {r["run_id"] for r in resp.json()["runs"]}

    assert {mine, theirs} <= listed(op_token)
    assert mine in listed(member_token) and theirs not in listed(member_token)


def test_the_cluster_view_names_another_users_run_only_to_operators(tmp_path: Path) -> None:
    fresh = load_settings(  # an empty cluster of its own
        tmp_path / "home", inventory=INVENTORY, profiles=PROFILES, embedded=False, isolation="none"
    )
    with TestClient(create_app(fresh, executor=FakeExecutor(), run_loops=False)) as client:
        rt: Runtime = client.app.state.runtime  # type: ignore[attr-defined]
        rt.pick_port = lambda: 40000
        check_cluster_view(client, rt)


def check_cluster_view(client: TestClient, rt: Runtime) -> None:
    owner, owner_token = _user(rt, Role.MEMBER)
    _, stranger_token = _user(rt, Role.MEMBER)
    _, operator_token = _user(rt, Role.OPERATOR)
    run_id = running_run(rt, user=owner)

    def named(token: str) -> tuple[set[str], int]:
        auth = {"Authorization": f"Bearer {token}"}
        nodes = client.get(f"{API_PREFIX}/cluster/status", headers=auth).json()["nodes"]
        return {r for n in nodes for r in n["runs"]}, sum(n["used"] for n in nodes)

    (seen, used), (hidden, counted) = named(operator_token), named(stranger_token)
    assert run_id in seen and run_id in named(owner_token)[0]
    assert run_id not in hidden and counted == used  # its GPUs still count as used
