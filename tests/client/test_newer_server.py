"""Today's client against a newer server: every answer it parses may carry fields it lacks.

The newer server is played by an in-memory HTTP transport (no sockets) answering what the next
version would send: today's JSON plus fields at several depths, and log stream events of a kind
this version does not know.
"""

from __future__ import annotations

import json

import httpx
import pytest

from starforge.cli.logs import follow_stream
from starforge.client.http import Client
from starforge.contract import api
from tests.client.newer_server import profiles, run_view


def client_of(routes: dict[str, httpx.Response]) -> Client:
    def handle(request: httpx.Request) -> httpx.Response:
        path = request.url.path.removeprefix(api.API_PREFIX)
        return routes.get(path, httpx.Response(404, json={"code": "not_found", "message": path}))

    return Client("http://newer.test", token="t", transport=httpx.MockTransport(handle))


def test_answers_with_new_fields_at_every_depth_parse_as_today() -> None:
    view, view_wire = run_view()
    listed, listed_wire = profiles()
    client = client_of(
        {
            "/health": httpx.Response(200, json={"ok": True, "region": "eu"}),
            "/profiles": httpx.Response(200, json=listed_wire),
            f"/runs/{view.run_id}": httpx.Response(200, json=view_wire),
            "/runs": httpx.Response(200, json={"runs": [view_wire], "next_cursor": "x"}),
        }
    )
    assert client.health()
    assert client.profiles() == listed
    assert client.get_run(view.run_id) == view
    assert client.list_runs().runs == [view]


@pytest.mark.parametrize(("accepted", "expected"), [(True, True), (False, False)])
def test_a_lifecycle_answer_is_read_typed(accepted: bool, expected: bool) -> None:
    ack = {"accepted": accepted, "message": "attempt 2 took over", "next_attempt": 3}
    client = client_of({"/runs/r-0000000001/lifecycle": httpx.Response(200, json=ack)})
    event = api.LifecycleEvent(attempt=1, event="heartbeat")
    assert client.lifecycle("r-0000000001", event) is expected


def sse(events: list[tuple[str, dict[str, object], str]]) -> httpx.Response:
    body = "".join(
        f"event: {name}\nid: {id_}\ndata: {json.dumps(data)}\n\n" for name, data, id_ in events
    )
    return httpx.Response(200, text=body, headers={"Content-Type": "text/event-stream"})


def test_following_a_newer_servers_log_stream_prints_every_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    view, _ = run_view()
    stream = sse(
        [
            ("status", {"status": "running", "reason": "", "attempts": 2, "node": "n1"}, "1:0"),
            ("log", {"attempt": 1, "text": "step 1\n", "stream": "stdout"}, "1:7"),
            ("progress", {"step": 1, "of": 10}, "1:7"),
            ("attempt", {"attempt": 2, "resumed_from": "ckpt-1"}, "2:0"),
            ("log", {"attempt": 2, "text": "step 2\n"}, "2:7"),
            ("end", {"status": "succeeded", "end_reason": "completed", "exit_code": 0}, "2:7"),
        ]
    )
    client = client_of({f"/runs/{view.run_id}/logs/stream": stream})
    assert follow_stream(client, view, 0) == "succeeded"
    printed = capsys.readouterr().out
    assert printed == "──── attempt 1 ────\nstep 1\n──── attempt 2 ────\nstep 2\n"
