"""The HTTP API through FastAPI's TestClient (no sockets): routing, auth, wire errors."""

from __future__ import annotations

import hashlib
import json
import stat
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from starforge.contract.api import API_PREFIX, CLIENT_VERSION_HEADER, RUN_TOKEN_HEADER
from starforge.contract.errors import from_wire
from starforge.server.app import create_app
from starforge.server.runtime import Runtime
from starforge.server.services.access import users
from starforge.server.services.runs import jobs
from starforge.server.services.scheduling import dispatch
from starforge.server.settings import Settings

from .factories import TOKENS, FakeExecutor, binding, eventually, request, run_row

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
        yield c


def runtime(client: TestClient) -> Runtime:
    return client.app.state.runtime  # type: ignore[attr-defined,no-any-return]


def submit_body(client: TestClient, key: str = "key-00000001", **spec_args: object) -> dict:
    return request(runtime(client), key=key, **spec_args).model_dump(mode="json")


def test_health_and_info_need_no_token(client: TestClient) -> None:
    assert client.get("/health").json() == {"ok": True}
    info = client.get("/info").json()
    assert info["executor"] == "local" and info["url"] == "http://127.0.0.1:9999"


def test_whoami_names_the_token_owner(client: TestClient) -> None:
    assert client.get("/whoami", headers=BOB).json() == {"user": "bob", "role": "member"}


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic abc"}]
)
def test_a_missing_or_wrong_token_is_unauthorized_on_the_wire(
    client: TestClient, headers: dict[str, str]
) -> None:
    resp = client.get("/whoami", headers=headers)
    assert resp.status_code == 401
    assert resp.json()["code"] == "auth.unauthorized" and resp.json()["hint"]


def test_an_old_client_is_told_to_upgrade(client: TestClient) -> None:
    resp = client.get("/health", headers={CLIENT_VERSION_HEADER: "0.0.9"})
    assert resp.status_code == 426
    err = from_wire(resp.json(), status=resp.status_code)
    assert err.code == "version.client_too_old"
    assert err.message.endswith("upgrade it with pip install -U 'starforge>=0.1.0'")
    assert client.get("/health", headers={CLIENT_VERSION_HEADER: "0.1.0"}).status_code == 200


def test_the_profile_registry_is_served(client: TestClient) -> None:
    names = [p["name"] for p in client.get("/profiles", headers=ALICE).json()["profiles"]]
    assert names[:2] == ["h200", "h100"]


def test_missing_blobs_are_reported_until_uploaded(client: TestClient) -> None:
    data = b"print('hi')\n"
    digest = hashlib.sha256(data).hexdigest()
    body = {"digests": [digest]}
    assert client.post("/blobs/missing", json=body, headers=ALICE).json() == {"missing": [digest]}
    resp = client.put(f"/blobs/{digest}", content=data, headers=ALICE)
    assert resp.status_code == 201 and resp.json() == {"sha256": digest, "size": len(data)}
    assert client.post("/blobs/missing", json=body, headers=ALICE).json() == {"missing": []}


def test_an_upload_whose_content_does_not_match_its_name_is_refused(client: TestClient) -> None:
    digest = hashlib.sha256(b"one").hexdigest()
    resp = client.put(f"/blobs/{digest}", content=b"two", headers=ALICE)
    assert resp.status_code == 400 and resp.json()["code"] == "blobs.digest_mismatch"
    assert not runtime(client).storage.has(digest)


def test_a_malformed_digest_is_a_usage_error(client: TestClient) -> None:
    resp = client.post("/blobs/missing", json={"digests": ["xyz"]}, headers=ALICE)
    assert resp.status_code == 400 and resp.json()["code"] == "usage.invalid_name"


def test_an_invalid_spec_names_the_field_path(client: TestClient) -> None:
    body = submit_body(client)
    del body["spec"]["method"]["digest"]
    resp = client.post("/jobs", json=body, headers=ALICE)
    assert resp.status_code == 400
    assert resp.json()["code"] == "usage.invalid_spec"
    assert "spec.method.digest" in resp.json()["message"]


def test_a_submit_without_a_bearer_token_is_refused_before_its_body_is_checked(
    client: TestClient,
) -> None:
    for headers in ({}, {"Authorization": "Basic abc"}):
        resp = client.post("/jobs", json={"spec": "not a spec"}, headers=headers)
        assert resp.status_code == 401 and resp.json()["code"] == "auth.unauthorized"


def test_a_submit_with_an_unknown_token_creates_nothing(client: TestClient) -> None:
    resp = client.post("/jobs", json=submit_body(client), headers={"Authorization": "Bearer x"})
    assert resp.status_code == 401 and resp.json()["code"] == "auth.unauthorized"
    assert jobs.count_runs(runtime(client), "alice") == 0


def test_submit_creates_once_per_key_201_then_200(client: TestClient) -> None:
    body = submit_body(client)
    first = client.post("/jobs", json=body, headers=ALICE)
    again = client.post("/jobs", json=body, headers=ALICE)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["created"] and not again.json()["created"]
    assert first.json()["run_id"] == again.json()["run_id"]
    assert first.json()["status"] == "queued" and first.json()["queue_position"] == 1


def test_an_admission_rejection_travels_as_its_class(client: TestClient) -> None:
    resp = client.post("/jobs", json=submit_body(client, profiles=["h200:24"]), headers=ALICE)
    assert resp.status_code == 422
    assert resp.json()["code"] == "admission.rejected" and "cluster has 2" in resp.json()["message"]


def test_runs_are_listed_read_by_prefix_and_private(client: TestClient) -> None:
    run_id = client.post("/jobs", json=submit_body(client), headers=ALICE).json()["run_id"]
    listed = client.get("/runs", headers=ALICE).json()["runs"]
    assert [r["run_id"] for r in listed] == [run_id]
    assert client.get("/runs", params={"status": "running"}, headers=ALICE).json()["runs"] == []
    view = client.get(f"/runs/{run_id[:5]}", headers=ALICE).json()
    assert view["run_id"] == run_id and view["events"][0]["dst"] == "queued"
    assert client.get("/runs", headers=BOB).json()["runs"] == []
    resp = client.get(f"/runs/{run_id}", headers=BOB)
    assert resp.status_code == 404 and resp.json()["code"] == "runs.not_found"


def test_an_unknown_status_filter_is_a_usage_error(client: TestClient) -> None:
    resp = client.get("/runs", params={"status": "sleeping"}, headers=ALICE)
    assert resp.status_code == 400 and resp.json()["code"] == "usage.invalid_spec"


def test_an_ambiguous_prefix_is_a_conflict_listing_candidates(client: TestClient) -> None:
    for i in range(2):
        client.post("/jobs", json=submit_body(client, key=f"key-0000000{i}"), headers=ALICE)
    resp = client.get("/runs/r-", headers=ALICE)
    assert resp.status_code == 409 and resp.json()["code"] == "runs.ambiguous"
    assert len(resp.json()["details"]["candidates"]) == 2


def test_stop_answers_accepted_then_rejected(client: TestClient) -> None:
    run_id = client.post("/jobs", json=submit_body(client), headers=ALICE).json()["run_id"]
    first = client.post(f"/runs/{run_id}/stop", headers=ALICE).json()
    second = client.post(f"/runs/{run_id}/stop", headers=ALICE).json()
    assert (first["accepted"], first["status"]) == (True, "stopped")
    assert (second["accepted"], second["message"]) == (False, f"run {run_id} already stopped")


def test_the_lifecycle_endpoint_takes_only_the_runs_own_token(client: TestClient) -> None:
    rt = runtime(client)
    run_id = client.post("/jobs", json=submit_body(client), headers=ALICE).json()["run_id"]
    for order in dispatch.schedule_pass(rt):
        dispatch.start_attempt(rt, order)
    url = f"/runs/{run_id}/lifecycle"
    event = {"attempt": 1, "node_rank": 0, "event": "running"}
    assert client.post(url, json=event, headers=ALICE).status_code == 401
    assert client.post(url, json=event, headers={RUN_TOKEN_HEADER: "forged"}).status_code == 403
    token = {RUN_TOKEN_HEADER: binding(rt, run_id)["run_token"]}
    assert client.post(url, json=event, headers=token).json()["accepted"]
    done = {"attempt": 1, "event": "exited", "exit_code": 0}
    assert client.post(url, json=done, headers=token).json()["accepted"]
    assert not client.post(url, json=done, headers=token).json()["accepted"]
    assert run_row(rt, run_id).status == "succeeded"


def test_logs_are_served_from_an_offset(client: TestClient) -> None:
    rt = runtime(client)
    run_id = client.post("/jobs", json=submit_body(client), headers=ALICE).json()["run_id"]
    for order in dispatch.schedule_pass(rt):
        dispatch.start_attempt(rt, order)
    path = run_row(rt, run_id).attempts[0].log_path
    with open(path, "w") as fh:
        fh.write("one\ntwo\n")
    chunk = client.get(f"/runs/{run_id}/logs", params={"offset": 4}, headers=ALICE).json()
    assert (chunk["data"], chunk["offset"], chunk["final"]) == ("two\n", 8, False)


def test_an_unknown_route_is_a_wire_error(client: TestClient) -> None:
    resp = client.get("/nope", headers=ALICE)
    assert resp.status_code == 404 and resp.json()["code"] == "not_found"


def test_an_unexpected_error_is_internal_without_a_traceback(
    settings: Settings, executor: FakeExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*_: object, **__: object) -> None:
        raise RuntimeError("secret detail")

    monkeypatch.setattr(jobs, "page", boom)
    app = create_app(settings, executor=executor, run_loops=False)
    with TestClient(app, raise_server_exceptions=False) as c:
        token = (settings.server_dir / "local-token").read_text().strip()
        resp = c.get(f"{API_PREFIX}/runs", headers={"Authorization": f"Bearer {token}"})
    assert resp.status_code == 500 and resp.json()["code"] == "server.internal"
    assert "secret" not in resp.text and "Traceback" not in resp.text


def test_the_embedded_server_creates_a_private_local_token_and_keeps_it(
    settings: Settings, executor: FakeExecutor
) -> None:
    path = settings.server_dir / "local-token"
    for _ in range(2):  # the second start re-registers the same token
        with TestClient(create_app(settings, executor=executor, run_loops=False)) as c:
            token = path.read_text().strip()
            resp = c.get(f"{API_PREFIX}/whoami", headers={"Authorization": f"Bearer {token}"})
            assert resp.json() == {"user": users.local_user_name(), "role": "admin"}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_the_loops_start_a_submitted_run_and_notice_its_runner_vanish(
    settings: Settings, executor: FakeExecutor
) -> None:
    with TestClient(create_app(settings, executor=executor)) as c:
        c.app.state.runtime.pick_port = lambda: 40000  # type: ignore[attr-defined]
        auth = {
            "Authorization": f"Bearer {(settings.server_dir / 'local-token').read_text().strip()}"
        }
        body = request(c.app.state.runtime).model_dump(mode="json")  # type: ignore[attr-defined]
        run_id = c.post(f"{API_PREFIX}/jobs", json=body, headers=auth).json()["run_id"]

        def status() -> str:
            return str(c.get(f"{API_PREFIX}/runs/{run_id}", headers=auth).json()["status"])

        eventually(lambda: status() == "starting", what="the scheduler loop")
        executor.die(executor.started[0][0])
        eventually(lambda: status() == "failed", what="the reconciler loop")


def test_a_large_submission_is_refused_with_the_same_answer_as_a_small_one(
    client: TestClient,
) -> None:
    """A body above the inline size is parsed in a worker thread (``bodies.parse_json``): its
    errors are the ones a small body gets, and a body that is not JSON is a 400 too."""

    def refused(padding: int) -> dict[str, object]:
        body = submit_body(client, key=f"key-pad-{padding:06d}")
        body["manifest"]["files"].append({"path": "../escape", "sha256": "0" * 64, "size": 1})
        body["manifest"]["files"] += [
            {"path": f"pad/file-{i:06d}.txt", "sha256": "0" * 64, "size": 1} for i in range(padding)
        ]
        got = client.post("/jobs", content=json.dumps(body).encode(), headers=JSON_ALICE)
        assert got.status_code == 400, got.text
        return got.json()

    small, large = refused(0), refused(3_000)  # 0.3 MB: past INLINE_PARSE_BYTES
    assert small["code"] == large["code"]
    assert "escape" in str(small["message"]) and "escape" in str(large["message"])
    not_json = client.post("/jobs", content=b"{" + b" " * 300_000, headers=JSON_ALICE)
    assert not_json.status_code == 400, not_json.text


JSON_ALICE = {**ALICE, "Content-Type": "application/json"}
