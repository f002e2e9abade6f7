"""Webhooks as an attack surface: where a user may make the server send requests (SSRF), and
the signing secret, which is shown once and never again.

The stance (docs in ``server/services/labops/notify.py``): http(s) URLs only, no credentials in
them, redirects never followed; on a lab server loopback, private, link-local (cloud metadata) and
other non-public addresses are refused unless an admin sets ``notify_allow_private``; the embedded
server, local to its one user, allows them by default (its receivers are on 127.0.0.1)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import ip_network
from pathlib import Path

import pytest
from alembic import command
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy import select, text

from starforge.contract.auth import Role
from starforge.contract.errors import UsageError
from starforge.contract.labops import EndpointCreate
from starforge.contract.states import JobStatus
from starforge.server import reactions
from starforge.server.db.engine import alembic_config, make_engine
from starforge.server.db.labops import NotifyEndpoint, NotifyOutbox
from starforge.server.db.models import Run, utcnow
from starforge.server.runtime import Runtime
from starforge.server.services.access import secret_keys, users
from starforge.server.services.labops import notify
from starforge.server.settings import Settings, load_settings
from tests.server.factories import INVENTORY, PROFILES, insert_run

from .conftest import ALICE, BOB, client_for, runtime, wire

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


# ---- every spelling of a non-public address, and malformed URLs (issue 29) ------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost/hook",
        "http://LocalHost./hook",
        "http://hooks.localhost:8080/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://[0:0:0:0:0:ffff:7f00:1]/hook",
        "http://0x7f000001/hook",
        "http://2130706433/hook",
        "http://127.1/hook",
        "http://0177.0.0.1/hook",
        "http://017700000001/hook",
        "http://0x7f.0.1/hook",
        "http://127.0.0.1./hook",
        "http://0/hook",
        "http://[::]/hook",
        "http://[::1]/hook",
        "http://10.0.0.1/hook",
        "http://172.16.0.1/hook",
        "http://100.64.0.1/hook",  # shared address space (carrier NAT)
        "http://169.254.169.254/latest/meta-data/",
        "http://[fe80::1]/hook",
        "http://[fc00::1]/hook",
        "http://224.0.0.1/hook",
        "http://[ff02::1]/hook",
        "http://240.0.0.1/hook",
        "http://255.255.255.255/hook",
        "http://[2002:7f00:1::]/hook",  # 6to4 around 127.0.0.1
        "http://[64:ff9b::a00:1]/hook",  # NAT64 around 10.0.0.1
        "https://[::ffff:a9fe:a9fe]/hook",  # 169.254.169.254, mapped
    ],
)
def test_every_spelling_of_a_non_public_address_is_refused_when_added(
    client: TestClient, url: str
) -> None:
    got = add(client, url)
    assert got["status"] == 400 and got["code"].startswith("usage"), got
    assert "non-public address" in got["message"] and url in got["message"]
    assert "notify_allow_cidrs" in got["hint"]
    assert client.get("/notify/endpoints", headers=ALICE).json()["endpoints"] == []


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://[::1", "malformed"),
        ("http://[127.0.0.1]/hook", "malformed"),
        ("http://93.184.216.34:99999/hook", "malformed"),
        ("http://93.184.216.34:0/hook", "invalid port"),
        ("http://1.2.3.4.5/hook", "ends in a number"),
        ("http://0x1g.0.0.1/hook", "ends in a number"),
        ("http://256.1.1.1/hook", "out of the IPv4 range"),
        ("http://09.1.1.1/hook", "not an octal number"),
        ("http://exa%6dple.com/hook", "not a valid host name"),
        ("http://[fe80::1%25eth0]/hook", "non-public address"),
    ],
)
def test_a_malformed_url_is_a_usage_error_not_a_crash(
    client: TestClient, url: str, says: str
) -> None:
    resp = client.post("/notify/endpoints", json={"url": url}, headers=ALICE)
    body = wire(resp)
    assert resp.status_code == 400 and body["code"].startswith("usage"), body
    assert says in body["message"], body


def test_a_name_is_checked_by_every_address_it_resolves_to(rt_client: TestClient) -> None:
    rt = runtime(rt_client)
    body = EndpointCreate(url="https://hooks.example.test/sf")
    for answers in (["127.0.0.1"], ["::1"], ["::ffff:10.0.0.7"], ["93.184.216.34", "10.0.0.7"]):
        with pytest.raises(UsageError, match="non-public address") as caught:
            notify.add(rt, "alice", body, resolve=lambda host, port, a=answers: a)
        assert caught.value.details["address"] in {"127.0.0.1", "::1", "10.0.0.7"}
    asked: list[tuple[str, int]] = []

    def public(host: str, port: int) -> list[str]:
        asked.append((host, port))
        return ["93.184.216.34"]

    made = notify.add(rt, "alice", body, resolve=public)
    assert made.url == "https://hooks.example.test/sf" and asked == [("hooks.example.test", 443)]


def test_a_viewer_cannot_add_a_webhook_and_an_operator_is_held_to_the_same_addresses(
    client: TestClient,
) -> None:
    with runtime(client).transaction() as session:
        for name, role in (("vic", Role.VIEWER), ("olga", Role.OPERATOR)):
            users.ensure_user(session, name, f"{name}-token")
            row = users.find(session, name)
            assert row is not None
            row.role = role.value
    viewer = {"Authorization": "Bearer vic-token"}
    operator = {"Authorization": "Bearer olga-token"}
    resp = client.post("/notify/endpoints", json={"url": PUBLIC}, headers=viewer)
    assert resp.status_code == 403 and "add webhooks" in wire(resp)["message"]
    assert client.get("/notify/endpoints", headers=viewer).json()["endpoints"] == []
    assert add(client, "http://127.0.0.1:8080/hook", operator)["status"] == 400
    assert add(client, PUBLIC, operator)["status"] == 200


def test_an_admin_allows_address_ranges_in_server_yaml(tmp_path: Path) -> None:
    home = tmp_path / "lab"
    home.mkdir()
    (home / "server.yaml").write_text("notify_allow_cidrs: [10.20.0.0/16, 'fd00:1::/64']\n")
    allowed = load_settings(home, inventory=INVENTORY, profiles=PROFILES, embedded=False)
    with client_for(allowed) as client:
        assert add(client, "http://10.20.3.4:8080/hook")["status"] == 200
        assert add(client, "http://[fd00:1::5]/hook")["status"] == 200
        assert add(client, "http://[::ffff:10.20.0.9]/hook")["status"] == 200
        refused = add(client, "http://10.21.0.1/hook")
        assert refused["status"] == 400 and "non-public address" in refused["message"]
        assert add(client, "http://127.0.0.1/hook")["status"] == 400
    (home / "server.yaml").write_text("notify_allow_cidrs: [10.20.0.1/16]\n")  # host bits set
    with pytest.raises(ValidationError, match="notify_allow_cidrs"):
        load_settings(home, inventory=INVENTORY, profiles=PROFILES, embedded=False)


# ---- delivery: to the address that was checked; one bad endpoint holds up no other ----------


@dataclass
class Receiver:
    """An HTTP receiver on a loopback address that records what it was sent."""

    host: str
    port: int = 0
    got: list[tuple[dict[str, str], bytes]] = field(default_factory=list)

    def __post_init__(self) -> None:
        got = self.got

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                got.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer((self.host, self.port), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def receivers() -> Iterator[list[Receiver]]:
    """Two receivers on one port: ``127.0.0.2`` (which a test allows) and ``127.0.0.1``."""
    made: list[Receiver] = []
    try:
        for _ in range(20):
            first = Receiver("127.0.0.2")
            try:
                made = [first, Receiver("127.0.0.1", first.port)]
                break
            except OSError:  # that port is taken on 127.0.0.1: try another
                first.close()
        assert made, "no port free on both 127.0.0.1 and 127.0.0.2"
        yield made
    finally:
        for receiver in made:
            receiver.close()


@pytest.fixture
def rt_client(settings: Settings) -> Iterator[TestClient]:
    """A lab server (no private addresses) that may reach 127.0.0.2 alone."""
    allowed = settings.model_copy(
        update={"notify_allow_cidrs": [ip_network("127.0.0.2/32")], "notify_timeout_s": 5.0}
    )
    with client_for(allowed) as client:
        yield client


def owe(rt: Runtime, user: str, count: int = 1, minutes: int = 0) -> list[str]:
    """``count`` runs of ``user`` that succeeded, each owing its payload to ``user``'s endpoints."""
    run_ids = []
    for i in range(count):
        run_id = f"r-{user[:3]}{minutes:04d}{i:05d}"
        insert_run(rt, run_id, user=user, status=JobStatus.SUCCEEDED, minutes=minutes + i)
        with rt.transaction() as session:
            run = session.get(Run, run_id)
            assert run is not None
            at = utcnow() - timedelta(minutes=60 - minutes)
            notify.enqueue(session, run, reactions.snapshot(run, at))
        run_ids.append(run_id)
    return run_ids


def tries(rt: Runtime, endpoint_id: str) -> list[int]:
    with rt.transaction() as session:
        rows = session.scalars(
            select(NotifyOutbox).where(NotifyOutbox.endpoint_id == endpoint_id)
        ).all()
        return sorted(row.tries for row in rows)


def test_a_delivery_connects_to_the_address_it_checked_with_the_name_as_host(
    rt_client: TestClient, receivers: list[Receiver]
) -> None:
    """DNS rebinding: the name answers an allowed address for the check and loopback after it;
    the try resolves once and connects to the checked address, never to the later answer."""
    rt = runtime(rt_client)
    allowed, internal = receivers
    answers = iter(["127.0.0.2", "127.0.0.2", "127.0.0.1", "127.0.0.1"])
    asked: list[str] = []

    def rebinding(host: str, port: int) -> list[str]:
        asked.append(host)
        return [next(answers)]

    url = f"http://hooks.example.test:{allowed.port}/sf?x=1"
    made = notify.add(rt, "alice", EndpointCreate(url=url), resolve=rebinding)
    [run_id] = owe(rt, "alice")
    assert notify.deliver_due(rt, resolve=rebinding) == 1
    assert asked == ["hooks.example.test"] * 2  # the add, then once for the try
    assert internal.got == []
    [(headers, body)] = allowed.got
    assert headers["host"] == f"hooks.example.test:{allowed.port}"
    signed = notify.sign(made.secret, int(headers["x-starforge-timestamp"]), body)
    assert headers["x-starforge-signature"] == signed
    assert json.loads(body)["run_id"] == run_id
    # The name now answers loopback: the next payload's try is refused, and recorded as such.
    owe(rt, "alice", minutes=1)
    assert notify.deliver_due(rt, resolve=rebinding) == 0
    assert internal.got == [] and len(allowed.got) == 1
    [last, first] = notify.delivery_log(rt, "alice").deliveries
    assert first.ok and not last.ok and "non-public address (127.0.0.1" in last.error


def test_one_bad_endpoint_holds_up_no_other_users_delivery(
    rt_client: TestClient, receivers: list[Receiver], caplog: pytest.LogCaptureFixture
) -> None:
    rt = runtime(rt_client)
    allowed, internal = receivers
    with rt.transaction() as session:  # rows an older server let in, which add now refuses
        for endpoint_id, url in (
            ("wh-malformed", "http://[::1"),
            ("wh-loopback", f"http://127.0.0.1:{internal.port}/hook"),
            ("wh-closed", "http://127.0.0.2:9/hook"),  # nothing listens there: refused
        ):
            session.add(
                NotifyEndpoint(
                    id=endpoint_id,
                    user="bob",
                    url=url,
                    events=["succeeded"],
                    ciphertext="an old secret",
                    key_id="",
                )
            )
    owe(rt, "bob", count=60)  # more than a pass once took, all due before alice's
    good = notify.add(rt, "alice", EndpointCreate(url=f"http://127.0.0.2:{allowed.port}/h"))
    [run_id] = owe(rt, "alice", minutes=30)
    with caplog.at_level(logging.WARNING):
        assert notify.deliver_due(rt) == 1
    [(_, body)] = allowed.got
    assert json.loads(body)["run_id"] == run_id and internal.got == []
    for bad in ("wh-malformed", "wh-loopback", "wh-closed"):
        assert tries(rt, bad) == [0] * 59 + [1]  # one try of one row; the others wait
    assert tries(rt, good.id) == [1]
    errors = {d.endpoint_id: d.error for d in notify.delivery_log(rt, "bob").deliveries}
    assert "malformed" in errors["wh-malformed"]
    assert "non-public address" in errors["wh-loopback"]
    assert "ConnectError" in errors["wh-closed"]
    assert all(r.exc_info is None for r in caplog.records)  # one line each, no tracebacks


# ---- the signing secret at rest ------------------------------------------------------------


def test_the_signing_secret_is_encrypted_at_rest(client: TestClient, settings: Settings) -> None:
    made = add(client, PUBLIC)
    rt = runtime(client)
    with rt.engine.connect() as conn:
        [row] = conn.execute(text("SELECT * FROM notify_endpoints")).mappings().all()
    assert made["secret"] not in json.dumps({k: str(v) for k, v in row.items()})
    assert row["key_id"] == secret_keys.load(settings.server_dir).current
    rt.engine.dispose()  # everything written back into the database file itself
    db = settings.server_dir / "starforge.db"
    for path in db.parent.glob(db.name + "*"):
        assert made["secret"].encode() not in path.read_bytes(), path


def test_a_secret_from_before_0021_is_sealed_and_still_signs_and_survives_a_key_rotation(
    settings: Settings, receivers: list[Receiver]
) -> None:
    allowed, _ = receivers
    engine = make_engine(str(settings.database_url))
    command.upgrade(alembic_config(engine), "0020_queue_order_index")
    with engine.begin() as conn:
        conn.execute(
            text(
                'INSERT INTO notify_endpoints (id, "user", url, events, project, secret, '
                "created_at) VALUES ('wh-old', 'alice', :url, '[\"succeeded\"]', NULL, "
                "'the-old-secret', '2025-01-01 00:00:00')"
            ),
            {"url": f"http://127.0.0.2:{allowed.port}/old"},
        )
    engine.dispose()
    lab = settings.model_copy(update={"notify_allow_cidrs": [ip_network("127.0.0.2/32")]})
    with client_for(lab) as client:  # the server's start migrates the database to the head
        rt = runtime(client)
        owe(rt, "alice")
        assert notify.deliver_due(rt) == 1  # its pass seals the row first
        with rt.engine.connect() as conn:
            sealed = conn.execute(text("SELECT ciphertext, key_id FROM notify_endpoints")).one()
        assert "the-old-secret" not in sealed[0] and sealed[1] != ""
        ring = secret_keys.begin_rotation(settings.server_dir)  # what a key rotation does
        assert notify.reseal(rt, ring) == {ring.current} != {sealed[1]}
        assert secret_keys.finish_rotation(settings.server_dir, ring, {ring.current})
        owe(rt, "alice", minutes=1)
        assert notify.deliver_due(rt) == 1
    for headers, body in allowed.got:
        timestamp = int(headers["x-starforge-timestamp"])
        assert headers["x-starforge-signature"] == notify.sign("the-old-secret", timestamp, body)
    assert len(allowed.got) == 2
