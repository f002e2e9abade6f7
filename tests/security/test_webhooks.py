"""Webhooks as an attack surface: where a user may make the server send requests (SSRF), and
the signing secret, which is shown once and never again.

The stance (docs in ``server/services/notify.py``): http(s) URLs only, no credentials in them,
redirects never followed; on a lab server loopback, private, link-local (cloud metadata) and other
non-public addresses are refused unless an admin sets ``notify_allow_private``; the embedded
server, local to its one user, allows them by default (its receivers are on 127.0.0.1)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from starforge.server.services import notify
from starforge.server.settings import Settings, load_settings
from tests.server.factories import INVENTORY, PROFILES

from .conftest import ALICE, BOB, client_for, wire

PUBLIC = "https://93.184.216.34/hooks/sf"  # an IP literal: no DNS in a unit test


def add(client: TestClient, url: str, headers: dict[str, str] = ALICE) -> dict:
    resp = client.post("/notify/endpoints", json={"url": url}, headers=headers)
    return {"status": resp.status_code, **resp.json()}


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "ftp://93.184.216.34/x",
        "gopher://93.184.216.34:70/_x",
        "javascript:alert(1)",
        "//93.184.216.34/no-scheme",
        "https://user:pw@93.184.216.34/creds-in-url",
        "http:///no-host",
    ],
)
def test_a_url_that_is_not_plain_http_or_https_is_refused(client: TestClient, url: str) -> None:
    got = add(client, url)
    assert got["status"] == 400 and got["code"].startswith("usage"), got
    listed = client.get("/notify/endpoints", headers=ALICE).json()["endpoints"]
    assert listed == []


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/hook",
        "http://localhost/hook",
        "http://10.1.2.3/hook",
        "http://192.168.0.10/hook",
        "http://169.254.169.254/latest/meta-data/",  # cloud metadata
        "http://[::1]:9000/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://0.0.0.0/hook",
    ],
)
def test_a_lab_server_refuses_loopback_private_and_metadata_addresses(
    client: TestClient, url: str
) -> None:
    got = add(client, url)
    assert got["status"] == 400, got
    assert "non-public address" in got["message"]
    assert "notify_allow_private" in got["hint"]


def test_an_admin_setting_allows_private_addresses(settings: Settings) -> None:
    allowed = settings.model_copy(update={"notify_allow_private": True})
    with client_for(allowed) as client:
        assert add(client, "http://127.0.0.1:8080/hook")["status"] == 200


def test_the_embedded_server_allows_loopback_by_default_and_a_lab_server_does_not(
    tmp_path: object,
) -> None:
    home = tmp_path / "h"  # type: ignore[operator]
    common = {"inventory": INVENTORY, "profiles": PROFILES}
    assert notify.allows_private(load_settings(home, embedded=True, **common))
    assert not notify.allows_private(load_settings(home, embedded=False, **common))
    lab_allows = load_settings(home, embedded=False, notify_allow_private=True, **common)
    assert notify.allows_private(lab_allows)


def test_the_secret_is_returned_once_and_never_again(client: TestClient) -> None:
    made = add(client, PUBLIC)
    assert made["status"] == 200
    secret = made["secret"]
    assert len(secret) >= 32
    for path in ("/notify/endpoints", "/notify/deliveries"):
        resp = client.get(path, headers=ALICE)
        assert resp.status_code == 200 and secret not in resp.text
    listed = client.get("/notify/endpoints", headers=ALICE).json()["endpoints"]
    assert [e["id"] for e in listed] == [made["id"]] and "secret" not in listed[0]


def test_another_user_neither_sees_nor_removes_a_webhook(client: TestClient) -> None:
    made = add(client, PUBLIC)
    assert client.get("/notify/endpoints", headers=BOB).json()["endpoints"] == []
    gone = client.delete(f"/notify/endpoints/{made['id']}", headers=BOB).json()
    assert gone == {"id": made["id"], "removed": False}
    resp = client.get("/notify/deliveries", params={"endpoint": made["id"]}, headers=BOB)
    assert resp.status_code == 404 and wire(resp)["code"] == "not_found"
    assert len(client.get("/notify/endpoints", headers=ALICE).json()["endpoints"]) == 1
