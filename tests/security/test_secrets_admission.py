"""Secrets sent straight to the API: admission re-checks every manifest with the packer's policy.

An attacker (or an old or foreign client) skips the packer and POSTs a manifest to ``/jobs``.
The real app (FastAPI's TestClient, no sockets) must refuse it with a stable code and create
nothing: no run row, no run directory.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from starforge.contract.api import API_PREFIX
from starforge.contract.jobspec import FileEntry
from starforge.server.app import create_app
from starforge.server.db.models import Run
from starforge.server.runtime import Runtime
from starforge.server.services.access import users
from starforge.server.settings import load_settings
from tests.server.factories import INVENTORY, PROFILES, TOKENS, FakeExecutor, request

ALICE = {"Authorization": f"Bearer {TOKENS['alice']}"}
PEM = b"-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----\n"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = load_settings(
        tmp_path / "home",
        inventory=INVENTORY,
        profiles=PROFILES,
        url="http://127.0.0.1:9999",
        isolation="none",  # fake jobs share the server's identity (services/access/isolation.py)
    )
    app = create_app(
        settings.model_copy(update={"embedded": False}), executor=FakeExecutor(), run_loops=False
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


def upload(client: TestClient, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    assert client.put(f"/blobs/{digest}", content=data, headers=ALICE).status_code == 201
    return digest


def body_with(client: TestClient, files: dict[str, bytes]) -> dict:
    """A valid submission plus ``files``, their blobs already uploaded (as an attacker would)."""
    rt = runtime(client)
    req = request(rt)
    extra = [FileEntry(path=p, sha256=upload(client, d), size=len(d)) for p, d in files.items()]
    req.manifest.files.extend(extra)
    return req.model_dump(mode="json")


def assert_nothing_created(client: TestClient) -> None:
    with runtime(client).transaction() as session:
        assert session.scalar(select(func.count()).select_from(Run)) == 0
    runs = runtime(client).storage.root / "runs"
    assert not runs.exists() or not any(runs.rglob("*"))


def test_a_manifest_with_sensitive_names_is_rejected_and_nothing_is_created(
    client: TestClient,
) -> None:
    names = ["common/.env", "id_rsa", "secrets/token.txt", "server.pem"]
    resp = client.post("/jobs", json=body_with(client, dict.fromkeys(names, b"x")), headers=ALICE)
    assert resp.status_code == 400, resp.text
    error = resp.json()
    assert error["code"] == "project.sensitive_files"
    assert error["details"]["files"] == sorted(names)
    assert_nothing_created(client)


def test_a_key_under_a_harmless_name_is_rejected_by_its_content(client: TestClient) -> None:
    resp = client.post("/jobs", json=body_with(client, {"common/notes.txt": PEM}), headers=ALICE)
    assert resp.status_code == 400, resp.text
    assert resp.json()["details"]["files"] == ["common/notes.txt"]
    assert "private key" in resp.json()["message"]
    assert_nothing_created(client)


def test_a_manifest_link_that_leaves_the_package_is_rejected(client: TestClient) -> None:
    body = body_with(client, {"common/a.txt": b"a"})
    body["manifest"]["files"][0]["symlink"] = "../../../../etc/passwd"
    resp = client.post("/jobs", json=body, headers=ALICE)
    assert resp.status_code == 400, resp.text
    assert resp.json()["code"] == "usage.invalid_spec"
    assert_nothing_created(client)


def test_a_clean_manifest_is_still_admitted(client: TestClient) -> None:
    resp = client.post("/jobs", json=body_with(client, {"common/util.py": b"X=1\n"}), headers=ALICE)
    assert resp.status_code == 201, resp.text
