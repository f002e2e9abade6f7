"""`sf job logs RUN -n N --no-follow`: the last lines, read from the end of the log, of every node
of the attempt (labelled) or of one."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from starforge.cli import logs as cli_logs
from starforge.cli.logtail import attempt_text
from starforge.client.http import Client
from starforge.contract.api import API_PREFIX
from starforge.contract.errors import UsageError
from starforge.server.runtime import Runtime
from tests.client.newer_server import run_view
from tests.server.factories import run_row, running_run

from .conftest import Counting, alice


def test_logs_n_no_follow_prints_the_last_lines_and_asks_only_for_the_tail(
    app_transport: httpx.BaseTransport, capsys: pytest.CaptureFixture[str]
) -> None:
    rt = app_transport.app.state.runtime  # type: ignore[attr-defined]
    run_id = running_run(rt)
    lines = [f"step {i}\n" for i in range(300_000)]  # ~3 MB: several answers from the start
    Path(run_row(rt, run_id).attempts[-1].log_path).write_text("".join(lines))
    counting = Counting(app_transport)
    with alice(counting) as client:
        cli_logs.tail_and_follow(client, client.get_run(run_id), 2, follow=False)
    assert capsys.readouterr().out == "step 299998\nstep 299999\n"
    assert counting.calls["GET logs"] == 2  # the tail, then "nothing more"


def two_node_run(rt: Runtime) -> str:
    run_id = running_run(rt, profiles=["h200:16"])
    first = Path(run_row(rt, run_id).attempts[-1].log_path)
    first.write_text("rank 0 up\nstep 1\nstep 2\n")
    first.with_name("attempt-1.node-1.log").write_text("rank 1 up\nNCCL error: unhandled\n")
    return run_id


@pytest.mark.parametrize(
    ("lines", "node", "printed"),
    [
        (
            0,
            None,
            "rank 0 up\nstep 1\nstep 2\n[node 1] rank 1 up\n[node 1] NCCL error: unhandled\n",
        ),
        (1, None, "step 2\n[node 1] NCCL error: unhandled\n"),  # each node's last lines
        (0, 1, "rank 1 up\nNCCL error: unhandled\n"),
        (1, 1, "NCCL error: unhandled\n"),
        (2, 0, "step 1\nstep 2\n"),
    ],
)
def test_logs_of_a_two_node_run_show_every_node_labelled_or_one_node_alone(
    app_transport: httpx.BaseTransport,
    capsys: pytest.CaptureFixture[str],
    lines: int,
    node: int | None,
    printed: str,
) -> None:
    rt = app_transport.app.state.runtime  # type: ignore[attr-defined]
    run_id = two_node_run(rt)
    with alice(Counting(app_transport)) as client:
        cli_logs.tail_and_follow(client, client.get_run(run_id), lines, follow=False, node=node)
    assert capsys.readouterr().out == printed


def test_a_single_node_runs_log_asks_for_no_other_node(app_transport: httpx.BaseTransport) -> None:
    rt = app_transport.app.state.runtime  # type: ignore[attr-defined]
    run_id = running_run(rt)
    Path(run_row(rt, run_id).attempts[-1].log_path).write_text("only\n")
    counting = Counting(app_transport)
    with alice(counting) as client:
        assert attempt_text(client, run_id, 1) == "only\n"
    assert counting.calls["GET logs"] == 2  # node 0's log, then "nothing more": no other node


def older_server(run_id: str) -> Client:
    """A server from before multi-node logs: it ignores ``node`` and answers node 0's log."""
    chunk = {"attempt": 1, "offset": 3, "data": "a\n", "final": True, "status": "succeeded"}
    stream = (
        'event: status\ndata: {"status": "succeeded", "reason": "", "attempts": 1}\n\n'
        'event: log\nid: 1:2\ndata: {"attempt": 1, "text": "a\\n"}\n\n'
        'event: end\nid: 1:2\ndata: {"status": "succeeded"}\n\n'
    )
    routes = {
        f"/runs/{run_id}/logs": httpx.Response(200, json=chunk),
        f"/runs/{run_id}/logs/stream": httpx.Response(
            200, text=stream, headers={"Content-Type": "text/event-stream"}
        ),
    }

    def handle(request: httpx.Request) -> httpx.Response:
        return routes[request.url.path.removeprefix(API_PREFIX)]

    return Client("http://older.test", token="t", transport=httpx.MockTransport(handle))


def test_an_older_server_that_ignores_node_is_said_to_not_show_one_node_alone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    view, _ = run_view()
    client = older_server(view.run_id)
    assert attempt_text(client, view.run_id, 1) == "a\n"  # every node it has: node 0
    with pytest.raises(UsageError, match="cannot read node 1's log"):
        attempt_text(client, view.run_id, 1, node=1)
    with pytest.raises(UsageError, match="cannot follow node 1's log alone"):
        cli_logs.follow_stream(client, view, 0, node=1)
    assert cli_logs.follow_stream(client, view, 0) == "succeeded"
    assert capsys.readouterr().out == "a\n"
