"""Users and tokens through the API: tokens shown once and stored as digests, expiry, revocation,
disabled users, and a lab that always keeps an admin; and the 0009 migration that moved each
user's one token into the tokens table."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import select

from starforge.contract.api import API_PREFIX
from starforge.server.app import create_app
from starforge.server.db.engine import alembic_config, make_engine, make_sessions, migrate
from starforge.server.db.models import Token, User, utcnow
from starforge.server.runtime import Runtime
from starforge.server.services.access import users
from starforge.server.settings import Settings

from .factories import FakeExecutor

ROOT = "chief-token"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def client(settings: Settings, executor: FakeExecutor) -> Iterator[TestClient]:
    app = create_app(
        settings.model_copy(update={"embedded": False}), executor=executor, run_loops=False
    )
    with TestClient(app, base_url="http://testserver" + API_PREFIX) as c:
        rt: Runtime = app.state.runtime
        with rt.transaction() as session:
            users.ensure_user(session, "chief", ROOT)
            users.make_admin(session, "chief")
        yield c


def add(client: TestClient, name: str, role: str = "member") -> str:
    resp = client.post("/users", json={"name": name, "role": role}, headers=bearer(ROOT))
    assert resp.status_code == 201, resp.text
    return str(resp.json()["token"])


def test_a_new_users_token_works_once_shown_and_only_its_digest_is_stored(
    client: TestClient,
) -> None:
    token = add(client, "alice")
    assert client.get("/whoami", headers=bearer(token)).json() == {
        "user": "alice",
        "role": "member",
    }
    rt: Runtime = client.app.state.runtime  # type: ignore[attr-defined]
    with rt.transaction() as session:
        stored = session.scalars(select(Token.sha256).join(User).where(User.name == "alice")).all()
    assert stored == [users.token_digest(token)]
    listed = client.get("/tokens", headers=bearer(token)).json()["tokens"]
    assert [t["name"] for t in listed] == ["default"] and "token" not in listed[0]


def test_a_revoked_or_expired_token_and_a_disabled_user_are_refused(client: TestClient) -> None:
    token = add(client, "alice")
    made = client.post("/tokens", json={"name": "ci", "expires_days": 1}, headers=bearer(token))
    assert made.status_code == 201
    ci = made.json()["token"]
    assert client.get("/whoami", headers=bearer(ci)).status_code == 200
    assert client.post("/tokens/ci/revoke", headers=bearer(token)).status_code == 200
    revoked = client.get("/whoami", headers=bearer(ci))
    assert revoked.status_code == 401 and revoked.json()["message"] == "the token was revoked"

    rt: Runtime = client.app.state.runtime  # type: ignore[attr-defined]
    with rt.transaction() as session:
        row = session.scalars(select(Token).where(Token.name == "default")).all()
        for t in row:
            t.expires_at = utcnow() - timedelta(seconds=1)
    expired = client.get("/whoami", headers=bearer(token))
    assert expired.status_code == 401 and expired.json()["message"] == "the token has expired"

    other = add(client, "bob")
    assert client.post("/users/bob/disable", headers=bearer(ROOT)).json()["disabled"] is True
    refused = client.get("/whoami", headers=bearer(other))
    assert refused.status_code == 401 and "bob is disabled" in refused.json()["message"]
    assert client.post("/users/bob/enable", headers=bearer(ROOT)).status_code == 200
    assert client.get("/whoami", headers=bearer(other)).status_code == 200


def test_a_tokens_last_use_is_recorded_on_first_use_and_then_at_most_every_few_minutes(
    client: TestClient,
) -> None:
    token = add(client, "alice")
    rt: Runtime = client.app.state.runtime  # type: ignore[attr-defined]

    def last_used() -> object:
        with rt.transaction() as session:
            digest = users.token_digest(token)
            return session.scalar(select(Token.last_used_at).where(Token.sha256 == digest))

    assert last_used() is None
    assert client.get("/whoami", headers=bearer(token)).status_code == 200
    first = last_used()
    assert first is not None
    assert client.get("/whoami", headers=bearer(token)).status_code == 200
    assert last_used() == first  # a request within LAST_USED_EVERY writes nothing
    with rt.transaction() as session:  # as if the token was last used long ago
        row = session.scalars(select(Token).where(Token.sha256 == users.token_digest(token))).one()
        row.last_used_at = utcnow() - users.LAST_USED_EVERY - timedelta(seconds=1)
    assert client.get("/whoami", headers=bearer(token)).status_code == 200
    assert last_used() > first  # type: ignore[operator]


def test_the_last_enabled_admin_cannot_be_demoted_or_disabled(client: TestClient) -> None:
    demote = client.put("/users/chief/role", json={"role": "member"}, headers=bearer(ROOT))
    assert demote.status_code == 400 and "last enabled admin" in demote.json()["message"]
    disable = client.post("/users/chief/disable", headers=bearer(ROOT))
    assert disable.status_code == 400
    add(client, "ada", "admin")
    demoted = client.put("/users/chief/role", json={"role": "member"}, headers=bearer(ROOT))
    assert demoted.json()["role"] == "member"


def test_adding_a_user_twice_or_an_unknown_role_is_a_usage_error(client: TestClient) -> None:
    add(client, "alice")
    again = client.post("/users", json={"name": "alice"}, headers=bearer(ROOT))
    assert again.status_code == 400 and "already exists" in again.json()["message"]
    bad = client.post("/users", json={"name": "zed", "role": "owner"}, headers=bearer(ROOT))
    assert bad.status_code == 400 and "role" in bad.json()["message"]


def test_the_0009_upgrade_moves_each_users_token_and_makes_users_members(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'old.db'}")
    command.upgrade(alembic_config(engine), "0008_user_blobs")
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO users (name, token_sha256, created_at, role) VALUES "
            "('alice', ?, '2025-01-01 00:00:00', 'user'), "
            "('chief', ?, '2025-01-01 00:00:00', 'admin')",
            (users.token_digest("alice-token"), users.token_digest("chief-token")),
        )
    migrate(engine)
    with make_sessions(engine)() as session:
        assert users.authenticate(session, "Bearer alice-token").role.value == "member"
        assert users.authenticate(session, "Bearer chief-token").role.value == "admin"
        rows = session.scalars(select(User).order_by(User.name)).all()
        assert [(u.name, u.disabled, [t.name for t in u.tokens]) for u in rows] == [
            ("alice", False, ["default"]),
            ("chief", False, ["default"]),
        ]
    command.downgrade(alembic_config(engine), "0008_user_blobs")  # and back, tokens kept
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT name, token_sha256, role FROM users").all() == [
            ("alice", users.token_digest("alice-token"), "user"),
            ("chief", users.token_digest("chief-token"), "admin"),
        ]
    engine.dispose()
