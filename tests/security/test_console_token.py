"""The console link carries a console-only token, never the user's own.

``sf job console --no-open`` used to print the caller's API token in the URL, where terminal
scrollback, shell history and browser history keep it. The link now carries a fresh token that
only reads (runs, logs, curves, the caller's usage) and expires after ``console_token_ttl_s``:
with it an attacker can neither submit, act on a run, mint or list tokens, nor administer.
"""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient
from sqlalchemy import select

from starforge.client.http import Client
from starforge.server.db.models import Token, utcnow
from tests.server.factories import submit

from .conftest import ALICE, runtime, wire


def console_token(client: TestClient) -> str:
    resp = client.post("/tokens/console", headers=ALICE)
    assert resp.status_code == 201, resp.text
    body = resp.json()
    assert body["info"]["scope"] == "console" and body["info"]["expires_at"]
    return str(body["token"])


def test_a_console_token_reads_the_users_runs_but_acts_on_nothing(client: TestClient) -> None:
    run_id = submit(runtime(client), "alice").run_id
    link = {"Authorization": f"Bearer {console_token(client)}"}
    assert client.get(f"/runs/{run_id}", headers=link).status_code == 200
    assert client.get("/runs", headers=link).status_code == 200
    refused = {
        "stop": client.post(f"/runs/{run_id}/stop", headers=link),
        "mint": client.post("/tokens", headers=link, json={}),
        "console": client.post("/tokens/console", headers=link),
        "list tokens": client.get("/tokens", headers=link),
        "quotas": client.get("/admin/quotas", headers=link),
    }
    for what, resp in refused.items():
        assert resp.status_code == 403, (what, resp.text)
        assert "only reads" in wire(resp)["message"], what
    assert client.get(f"/runs/{run_id}", headers=ALICE).json()["status"] == "queued"


def test_a_console_token_stops_working_when_it_expires(client: TestClient) -> None:
    token = console_token(client)
    with runtime(client).transaction() as session:
        for row in session.scalars(select(Token).where(Token.scope == "console")):
            row.expires_at = utcnow() - timedelta(seconds=1)
    resp = client.get("/runs", headers={"Authorization": f"Bearer {token}"})
    assert resp.status_code == 401 and "expired" in wire(resp)["message"]


def test_the_console_link_carries_a_console_token_and_not_the_users_own(
    client: TestClient,
) -> None:
    api = Client(str(client.base_url), token=ALICE["Authorization"].removeprefix("Bearer "))
    api._http = client  # the app in process: no sockets
    api._http.headers.update(ALICE)
    url = api.console_url(None, sign_in=True)
    own = ALICE["Authorization"].removeprefix("Bearer ")
    assert own not in url and "?token=" in url
    linked = url.rsplit("?token=", 1)[1]
    with runtime(client).transaction() as session:
        scopes = [t.scope for t in session.scalars(select(Token)) if t.name.startswith("console-")]
    assert scopes == ["console"]
    assert client.get("/runs", headers={"Authorization": f"Bearer {linked}"}).is_success
