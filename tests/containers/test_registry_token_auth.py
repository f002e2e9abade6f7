"""Admission against registries as the world runs them: ``docker-registry`` with ``auth: token``
on 127.0.0.1 (tests/containers/token_registry.py), whose every anonymous answer is a 401 with a
Bearer challenge. A tag is pinned through an anonymous token where the token service grants one,
through the stored login where it demands one; each refusal has its own stable code and says
what to do. Without docker-registry the tests skip, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from sqlalchemy import func, select

from starforge.contract.errors import (
    RegistryAuthUnreachable,
    RegistryLoginNeeded,
    RegistryLoginRefused,
    Rejected,
)
from starforge.contract.registries import RegistryLoginSet
from starforge.server.db.models import Run
from starforge.server.registry_auth import Login, basic_header
from starforge.server.runtime import Runtime
from starforge.server.services.data import registries
from tests.containers.test_images_registry import push, rt, submit
from tests.containers.token_registry import TokenRegistry, free_port, token_registry
from tests.server.factories import run_row

__all__ = ["rt"]  # a fixture this module uses

pytestmark = pytest.mark.containers
PASSWORD = "reader-password-7f3a"


@pytest.fixture
def reg(tmp_path: Path) -> Iterator[TokenRegistry]:
    with token_registry(tmp_path / "registry") as made:
        made.service.users = {"reader": PASSWORD}
        yield made


def push_tiny(reg: TokenRegistry, name: str = "lab/tiny", tag: str = "1") -> str:
    auth = {"Authorization": f"Bearer {reg.push_token(name)}"}
    return push(reg.address, name, tag, headers=auth)


def store_login(rt: Runtime, host: str, username: str, password: str) -> None:
    with rt.transaction() as session:
        body = RegistryLoginSet(username=username, password=password)
        registries.put(rt, session, "admin", host, body)


def runs(rt: Runtime) -> int:
    with rt.transaction() as session:
        return session.scalar(select(func.count()).select_from(Run)) or 0


def test_a_tag_behind_a_bearer_challenge_is_pinned_with_an_anonymous_token(
    rt: Runtime, reg: TokenRegistry
) -> None:
    digest = push_tiny(reg)
    answer = submit(rt, image=f"{reg.address}/lab/tiny:1")
    assert run_row(rt, answer.run_id).image == f"{reg.address}/lab/tiny@{digest}"
    # The token was asked for anonymously, for exactly the repository's pull scope.
    assert [(r.user, r.scopes) for r in reg.service.requests] == [
        ("", ["repository:lab/tiny:pull"])
    ]


def test_a_token_service_that_answers_access_token_is_understood(
    rt: Runtime, reg: TokenRegistry
) -> None:
    reg.service.token_key = "access_token"
    digest = push_tiny(reg)
    answer = submit(rt, image=f"{reg.address}/lab/tiny:1")
    assert run_row(rt, answer.run_id).image.endswith(f"@{digest}")


def test_a_token_service_that_demands_credentials_is_refused_with_the_login_command_then_works(
    rt: Runtime, reg: TokenRegistry
) -> None:
    digest = push_tiny(reg)
    reg.service.anonymous = "refuse"
    with pytest.raises(RegistryLoginNeeded) as caught:
        submit(rt, image=f"{reg.address}/lab/tiny:1")
    assert caught.value.code == "admission.registry_login_needed"
    assert f"image registry {reg.address} needs credentials" in caught.value.message
    assert f"sf admin registry login {reg.address}" in (caught.value.hint or "")
    assert runs(rt) == 0
    store_login(rt, reg.address, "reader", PASSWORD)
    answer = submit(rt, image=f"{reg.address}/lab/tiny:1")
    assert run_row(rt, answer.run_id).image == f"{reg.address}/lab/tiny@{digest}"
    assert reg.service.pulled_by("reader") == 1


def test_an_anonymous_token_without_access_asks_for_a_login_as_docker_hub_does(
    rt: Runtime, reg: TokenRegistry
) -> None:
    digest = push_tiny(reg, "lab/private")
    reg.service.anonymous = "nothing"  # a token is given, but it reaches no repository
    with pytest.raises(RegistryLoginNeeded, match="HTTP 401"):
        submit(rt, image=f"{reg.address}/lab/private:1")
    store_login(rt, reg.address, "reader", PASSWORD)
    answer = submit(rt, image=f"{reg.address}/lab/private:1")
    assert run_row(rt, answer.run_id).image.endswith(f"@{digest}")


def test_a_stored_login_the_token_service_refuses_is_rejected_as_refused(
    rt: Runtime, reg: TokenRegistry
) -> None:
    push_tiny(reg)
    store_login(rt, reg.address, "reader", "not-the-password")
    with pytest.raises(RegistryLoginRefused) as caught:
        submit(rt, image=f"{reg.address}/lab/tiny:1")
    assert caught.value.code == "admission.registry_login_refused"
    assert "refused the login stored for it (user 'reader')" in caught.value.message
    assert f"sf admin registry login {reg.address}" in (caught.value.hint or "")
    assert "not-the-password" not in str(caught.value.to_wire())
    assert runs(rt) == 0


def test_an_unreachable_token_service_is_rejected_naming_its_realm(
    rt: Runtime, tmp_path: Path
) -> None:
    dead = f"http://127.0.0.1:{free_port()}/token"  # nobody listens there
    with (
        token_registry(tmp_path / "registry", realm=dead) as reg,
        pytest.raises(RegistryAuthUnreachable) as caught,
    ):
        submit(rt, image=f"{reg.address}/lab/tiny:1")
    assert caught.value.code == "admission.registry_auth_unreachable"
    assert f"the token service of image registry {reg.address} is unreachable" in (
        caught.value.message
    )
    assert dead in caught.value.message
    assert runs(rt) == 0


# ---- a registry that asks for Basic credentials (no token service) ---------------------------


DIGEST = "sha256:" + hashlib.sha256(b"basic-registry").hexdigest()


@pytest.fixture
def basic_registry() -> Iterator[tuple[str, list[str]]]:
    """A registry stand-in (an outside service) on 127.0.0.1 that answers the manifest of
    ``lab/tiny:1`` only with ``reader``'s Basic login, and otherwise a 401 Basic challenge; or,
    for ``lab/bearer``, a Bearer challenge whose realm is plain HTTP off loopback. Yields its
    address and the Authorization headers it received."""
    seen: list[str] = []
    expected = basic_header(Login("reader", PASSWORD))

    class Handler(BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:
            given = self.headers.get("Authorization", "")
            seen.append(given)
            if self.path.startswith("/v2/lab/bearer/"):
                self.send_response(401)
                challenge = 'Bearer realm="http://tokens.example/token",service="reg"'
                self.send_header("WWW-Authenticate", challenge)
            elif given == expected:
                self.send_response(200)
                self.send_header("Docker-Content-Digest", DIGEST)
            else:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="lab registry"')
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_a_basic_challenge_is_answered_with_the_stored_login(
    rt: Runtime, basic_registry: tuple[str, list[str]]
) -> None:
    address, seen = basic_registry
    with pytest.raises(RegistryLoginNeeded, match="holds no login for it") as caught:
        submit(rt, image=f"{address}/lab/tiny:1")
    assert f"sf admin registry login {address}" in (caught.value.hint or "")
    assert seen == [""]  # no login stored: nothing was sent
    store_login(rt, address, "reader", PASSWORD)
    answer = submit(rt, image=f"{address}/lab/tiny:1")
    assert run_row(rt, answer.run_id).image == f"{address}/lab/tiny@{DIGEST}"
    store_login(rt, address, "reader", "wrong")
    with pytest.raises(RegistryLoginRefused, match="HTTP 401 from the registry"):
        submit(rt, image=f"{address}/lab/tiny:1")


def test_a_login_is_never_sent_in_the_clear_to_a_realm_off_loopback(
    rt: Runtime, basic_registry: tuple[str, list[str]]
) -> None:
    address, _ = basic_registry
    store_login(rt, address, "reader", PASSWORD)
    with pytest.raises(Rejected, match="does not send credentials in the clear") as caught:
        submit(rt, image=f"{address}/lab/bearer:1")
    assert "insecure_registries" in (caught.value.hint or "")
    assert runs(rt) == 0
