"""Registry logins through the API (TestClient, no sockets): an admin stores, lists and removes
them, the password is sealed at rest and never shown, a key rotation re-seals them, and a run's own
runner gets the login of its image's registry only while its attempt starts or runs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from starforge.contract.api import API_PREFIX, RUN_TOKEN_HEADER
from starforge.contract.errors import ServerError
from starforge.server.app import create_app
from starforge.server.db.registries import RegistryLogin
from starforge.server.runtime import Runtime
from starforge.server.services.access import secrets, users
from starforge.server.services.data import registries
from starforge.server.services.scheduling import dispatch
from starforge.server.settings import Settings

from .factories import TOKENS, FakeExecutor, binding, report, request

ALICE = {"Authorization": f"Bearer {TOKENS['alice']}"}
ROOT = {"Authorization": "Bearer root-token"}
PASSWORD = "ngc-api-key-0123456789-abcdef"


def make_client(settings: Settings, executor: FakeExecutor) -> TestClient:
    app = create_app(
        settings.model_copy(update={"embedded": False}), executor=executor, run_loops=False
    )
    return TestClient(app, base_url="http://testserver" + API_PREFIX)


@pytest.fixture
def client(settings: Settings, executor: FakeExecutor) -> Iterator[TestClient]:
    with make_client(settings, executor) as c:
        prepare(runtime(c))
        yield c


def prepare(rt: Runtime) -> None:
    rt.pick_port = lambda: 40000  # no sockets in unit tests
    with rt.transaction() as session:
        for name, token in {**TOKENS, "root": "root-token"}.items():
            users.ensure_user(session, name, token)
        users.make_admin(session, "root")


def runtime(client: TestClient) -> Runtime:
    return client.app.state.runtime  # type: ignore[attr-defined,no-any-return]


def login(client: TestClient, host: str, username: str = "$oauthtoken", **kw: Any) -> Any:
    body = {"username": username, "password": kw.get("password", PASSWORD)}
    return client.put(f"/admin/registry-logins/{host}", json=body, headers=kw.get("as_", ROOT))


def started_run(client: TestClient, image: str) -> tuple[str, str]:
    """(run id, its runner's token) of a run of ``image`` whose attempt is starting."""
    rt = runtime(client)
    req = request(rt)
    req = req.model_copy(update={"spec": req.spec.model_copy(update={"image": image})})
    made = client.post("/jobs", json=req.model_dump(mode="json"), headers=ALICE)
    assert made.status_code == 201, made.text
    run_id = made.json()["run_id"]
    for order in dispatch.schedule_pass(rt):
        dispatch.start_attempt(rt, order)
    return run_id, binding(rt, run_id)["run_token"]


def fetch(client: TestClient, run_id: str, token: str, attempt: int = 1) -> Any:
    body, headers = {"attempt": attempt}, {RUN_TOKEN_HEADER: token}
    return client.post(f"/runs/{run_id}/registry-auth", json=body, headers=headers)


def test_an_admin_stores_lists_and_removes_a_login_and_no_answer_shows_the_password(
    client: TestClient,
) -> None:
    stored = login(client, "NVCR.io")
    assert stored.status_code == 200, stored.text
    assert stored.json()["host"] == "nvcr.io" and PASSWORD not in stored.text
    listed = client.get("/admin/registry-logins", headers=ROOT)
    assert [(i["host"], i["username"], i["set_by"]) for i in listed.json()["logins"]] == [
        ("nvcr.io", "$oauthtoken", "root")
    ]
    assert PASSWORD not in listed.text
    gone = client.delete("/admin/registry-logins/nvcr.io", headers=ROOT)
    assert gone.json() == {"host": "nvcr.io", "removed": True}
    again = client.delete("/admin/registry-logins/nvcr.io", headers=ROOT)
    assert again.json() == {"host": "nvcr.io", "removed": False}
    assert client.get("/admin/registry-logins", headers=ROOT).json()["logins"] == []


def test_a_member_may_neither_store_nor_list_logins(client: TestClient) -> None:
    refused = login(client, "ghcr.io", as_=ALICE)
    assert refused.status_code == 403 and "admins" in refused.json()["message"]
    assert client.get("/admin/registry-logins", headers=ALICE).status_code == 403
    assert client.get("/admin/registry-logins", headers=ROOT).json()["logins"] == []


@pytest.mark.parametrize("host", ["https:ghcr.io", "ghcr.io:", "-bad-", "a b", "ghcr_io"])
def test_a_host_that_is_no_registry_host_is_refused(client: TestClient, host: str) -> None:
    resp = login(client, host)
    assert resp.status_code == 400, resp.text
    assert "HOST[:PORT]" in resp.json()["message"]


def test_the_password_is_sealed_at_rest_and_bound_to_its_host(client: TestClient) -> None:
    rt = runtime(client)
    login(client, "ghcr.io")
    login(client, "nvcr.io", password="another-password-42")
    with rt.transaction() as session:
        rows = {r.host: r for r in session.scalars(select(RegistryLogin))}
        assert all(PASSWORD not in r.ciphertext for r in rows.values())
        # A ciphertext copied onto another host's row does not open there.
        rows["nvcr.io"].ciphertext, rows["nvcr.io"].key_id = (
            rows["ghcr.io"].ciphertext,
            rows["ghcr.io"].key_id,
        )
    found = registries.login_for(rt, "ghcr.io")
    assert found is not None and (found.username, found.password) == ("$oauthtoken", PASSWORD)
    with pytest.raises(ServerError, match="does not open"):
        registries.login_for(rt, "nvcr.io")
    assert registries.login_for(rt, "quay.io") is None


def test_a_key_rotation_reseals_the_logins_which_still_open(client: TestClient) -> None:
    rt = runtime(client)
    login(client, "ghcr.io")
    with rt.transaction() as session:
        before = session.scalars(select(RegistryLogin.key_id)).one()
    done = secrets.rotate(rt)
    with rt.transaction() as session:
        after = session.scalars(select(RegistryLogin.key_id)).one()
    assert after == done.key_id != before and before in done.retired
    found = registries.login_for(rt, "ghcr.io")
    assert found is not None and found.password == PASSWORD


def test_the_runner_gets_its_images_registry_login_while_its_attempt_starts_or_runs(
    client: TestClient,
) -> None:
    rt = runtime(client)
    login(client, "ghcr.io")
    login(client, "nvcr.io", password="not-this-runs-registry")
    run_id, token = started_run(client, "ghcr.io/lab/train:1")
    got = fetch(client, run_id, token)
    assert got.status_code == 200 and got.headers["cache-control"] == "no-store"
    assert got.json() == {
        "registry": "ghcr.io",
        "username": "$oauthtoken",
        "password": PASSWORD,
        "tls_verify": True,
        "withheld": "",
    }
    # The job's own token, a user's token, another attempt: nothing.
    assert fetch(client, run_id, binding(rt, run_id)["job_token"]).status_code == 403
    user_call = client.post(f"/runs/{run_id}/registry-auth", json={"attempt": 1}, headers=ALICE)
    assert user_call.status_code == 401
    assert fetch(client, run_id, token, attempt=2).status_code == 403
    report(rt, run_id, "running")
    assert fetch(client, run_id, token).status_code == 200
    report(rt, run_id, "exited", exit_code=0)
    assert fetch(client, run_id, token).status_code == 403


def test_a_run_of_a_registry_without_a_login_gets_an_answer_without_one(
    client: TestClient,
) -> None:
    login(client, "nvcr.io")
    run_id, token = started_run(client, "127.0.0.1:5000/lab/tiny:1")
    got = fetch(client, run_id, token).json()
    assert got == {
        "registry": "127.0.0.1:5000",
        "username": "",
        "password": "",
        "tls_verify": False,  # spoken to over plain HTTP, as admission does
        "withheld": "",
    }


def test_on_slurm_the_login_is_withheld_from_runners_and_the_answer_says_why(
    settings: Settings, executor: FakeExecutor
) -> None:
    # The scheduler never runs here; only the route's answer depends on the executor setting.
    on_slurm = settings.model_copy(update={"executor": "slurm"})
    with make_client(on_slurm, executor) as client:
        prepare(runtime(client))
        rt = runtime(client)
        login(client, "ghcr.io")
        with rt.transaction() as session:
            row = session.get(RegistryLogin, "ghcr.io")
            assert row is not None
        rt.settings = settings  # admission and dispatch as on the local executor
        run_id, token = started_run(client, "ghcr.io/lab/train:1")
        rt.settings = on_slurm
        got = fetch(client, run_id, token).json()
    assert got["registry"] == "ghcr.io" and (got["username"], got["password"]) == ("", "")
    assert "not handed to runners on Slurm" in got["withheld"]
