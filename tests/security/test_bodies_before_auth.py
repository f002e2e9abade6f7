"""Bodies before auth: a request is answered from its headers alone unless they authenticate it.

What an attacker sends, through a real server on 127.0.0.1: a huge body to the submit route (or
a runner's route, or an admin's) with no token, a wrong token, or a token whose role falls short.
Each is refused while the upload is still going: the server took only what socket buffers hold,
answered, and its memory did not grow by the body. A client-version header no client sends is a
400 with one line saying so, on any route.
"""

from __future__ import annotations

import json

import httpx
import pytest

from starforge.contract.api import API_PREFIX, CLIENT_VERSION_HEADER, RUN_TOKEN_HEADER
from tests.server.factories import TOKENS

from . import attack
from .conftest import Live

MB = 1024 * 1024
HUGE = 60 * MB  # under the submit route's 64 MB limit: only authentication can refuse it
JSON = {"Content-Type": "application/json"}


def _warm(live: Live) -> None:
    """Every code path of a refusal taken once, so what follows measures the body alone."""
    with httpx.Client(base_url=live.url) as http:
        assert http.get(f"{API_PREFIX}/health").status_code == 200
    attack.post(live.url, f"{API_PREFIX}/jobs", total=1, headers=JSON)
    attack.post(live.url, f"{API_PREFIX}/jobs", total=1, headers={**JSON, **_bearer("nope")})


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _refused_unread(answer: attack.Answer, status: int, code: str) -> None:
    assert answer.status == status, answer.body
    assert json.loads(answer.body)["code"] == code
    # The answer came while the client was still sending: what got through is socket buffers.
    assert answer.sent < HUGE // 4, f"the server took {answer.sent} bytes before answering"


@pytest.mark.parametrize("chunked", [False, True], ids=["declared", "chunked"])
def test_a_huge_submit_without_a_token_is_refused_before_it_is_read(
    live: Live, chunked: bool
) -> None:
    _warm(live)
    before = live.rss_kib()
    answer = attack.post(live.url, f"{API_PREFIX}/jobs", total=HUGE, headers=JSON, chunked=chunked)
    grew = live.rss_kib() - before
    _refused_unread(answer, 401, "auth.unauthorized")
    assert grew < 16 * 1024, f"RSS grew by {grew} KiB for a refused body"


def test_a_huge_submit_with_a_wrong_token_is_refused_before_it_is_read(live: Live) -> None:
    _warm(live)
    before = live.rss_kib()
    headers = {**JSON, **_bearer("not-a-token-of-anyone")}
    answer = attack.post(live.url, f"{API_PREFIX}/jobs", total=HUGE, headers=headers)
    grew = live.rss_kib() - before
    _refused_unread(answer, 401, "auth.unauthorized")
    assert "not valid" in json.loads(answer.body)["message"]
    assert grew < 16 * 1024, f"RSS grew by {grew} KiB for a refused body"


def test_a_members_huge_body_to_an_admin_route_is_refused_from_its_headers(live: Live) -> None:
    # /users takes 1 MB at most: a server that read the chunked body would answer 413, not 403.
    headers = {**JSON, **_bearer(TOKENS["alice"])}
    answer = attack.post(live.url, f"{API_PREFIX}/users", total=HUGE, headers=headers, chunked=True)
    _refused_unread(answer, 403, "auth.forbidden")


@pytest.mark.parametrize("route", ["lifecycle", "lifecycle/batch", "ingest", "secrets"])
def test_a_runner_route_refuses_a_body_without_its_run_token_unread(live: Live, route: str) -> None:
    path = f"{API_PREFIX}/runs/r-0000000000/{route}"
    answer = attack.post(live.url, path, total=HUGE, headers=JSON, chunked=True)
    _refused_unread(answer, 401, "auth.unauthorized")
    forged = {**JSON, RUN_TOKEN_HEADER: "forged"}  # a token, for a run that does not exist
    answer = attack.post(live.url, path, total=HUGE, headers=forged, chunked=True)
    assert answer.status in (403, 404) and answer.sent < HUGE // 4


def test_an_authenticated_body_is_still_read_and_answered(live: Live) -> None:
    with httpx.Client(base_url=live.url, headers=_bearer(TOKENS["bob"])) as http:
        resp = http.post(f"{API_PREFIX}/blobs/missing", json={"digests": ["a" * 64]})
        assert resp.status_code == 200, resp.text
        assert resp.json() == {"missing": ["a" * 64]}
        # A small refused body keeps the connection: the next request on it is answered.
        bad = http.post(f"{API_PREFIX}/jobs", json={}, headers=_bearer("wrong"))
        assert bad.status_code == 401
        assert http.get(f"{API_PREFIX}/whoami").json()["user"] == "bob"


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/health"), ("GET", "/whoami"), ("POST", "/jobs")],
)
def test_a_client_header_of_4301_digits_is_a_400_with_one_line(
    live: Live, method: str, path: str
) -> None:
    headers = {CLIENT_VERSION_HEADER: "9" * 4301, **JSON, **_bearer(TOKENS["alice"])}
    with httpx.Client(base_url=live.url) as http:
        resp = http.request(method, f"{API_PREFIX}{path}", headers=headers, content=b"{}")
    assert resp.status_code == 400, resp.text
    body = resp.json()
    assert body["code"].startswith("usage.")
    assert CLIENT_VERSION_HEADER in body["message"] and "\n" not in body["message"]
    assert len(body["message"]) < 200  # names the header and its length, not the digits
