"""A run's log over Server-Sent Events: whole lines, resumable ids, attempts, the end.

Finished runs are read through the HTTP endpoint (FastAPI's TestClient returns a response once
the stream ends); following a live run drives the stream's event generator directly, writing to
the log file and reporting the runner's exit between events. No socket is opened.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from starforge.client.sse import parse
from starforge.contract import logcursor
from starforge.contract.api import API_PREFIX, StreamEnd, StreamLog, StreamStatus
from starforge.contract.states import JobStatus
from starforge.server.app import create_app
from starforge.server.runtime import Runtime
from starforge.server.services.access import users
from starforge.server.services.observability import logs
from starforge.server.services.runs import actions, jobs
from starforge.server.settings import Settings

from .factories import (
    TOKENS,
    FakeExecutor,
    force,
    member,
    report,
    run_row,
    running_run,
    schedule,
    submit,
)

ALICE = {"Authorization": f"Bearer {TOKENS['alice']}"}


@pytest.fixture
def client(settings: Settings, executor: FakeExecutor) -> Iterator[TestClient]:
    app = create_app(
        settings.model_copy(update={"embedded": False}), executor=executor, run_loops=False
    )
    with TestClient(app, base_url="http://testserver" + API_PREFIX) as c:
        rt: Runtime = app.state.runtime
        rt.pick_port = lambda: 40000
        with rt.transaction() as session:
            for name, token in TOKENS.items():
                users.ensure_user(session, name, token)
        yield c


def runtime(client: TestClient) -> Runtime:
    return client.app.state.runtime  # type: ignore[attr-defined,no-any-return]


def log_of(rt: Runtime, run_id: str, attempt: int = 1) -> Path:
    return Path(run_row(rt, run_id).attempt(attempt).log_path)  # type: ignore[union-attr]


def events(client: TestClient, run_id: str, **kw: Any) -> list[tuple[str, Any, str | None]]:
    headers = {**ALICE, **kw.pop("headers", {})}
    resp = client.get(f"/runs/{run_id}/logs/stream", headers=headers, params=kw)
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("text/event-stream")
    return [(e.event, json.loads(e.data), e.id) for e in parse(resp.text.splitlines())]


def text(got: list[tuple[str, Any, str | None]]) -> str:
    return "".join(data["text"] for kind, data, _ in got if kind == "log")


def finished_run(rt: Runtime, content: bytes, exit_code: int = 0) -> str:
    run_id = running_run(rt)
    log_of(rt, run_id).write_bytes(content)
    report(rt, run_id, "exited", exit_code=exit_code)
    return run_id


def test_a_finished_runs_stream_is_its_whole_log_then_end(client: TestClient) -> None:
    content = b"step 1\nstep 2\nno newline at the end"
    run_id = finished_run(runtime(client), content)
    got = events(client, run_id)
    assert got[0][0] == "status" and got[0][1]["status"] == "succeeded"
    assert text(got) == content.decode()
    kind, data, last_id = got[-1]
    assert (kind, data["status"], data["exit_code"]) == ("end", "succeeded", 0)
    assert last_id == f"1:{len(content)}"


def test_resuming_from_an_event_id_sends_exactly_the_rest(client: TestClient) -> None:
    lines = [f"line {i}\n".encode() for i in range(50)]
    run_id = finished_run(runtime(client), b"".join(lines))
    after_ten = len(b"".join(lines[:10]))
    resumed = events(client, run_id, headers={"Last-Event-ID": f"1:{after_ten}"})
    assert text(resumed) == b"".join(lines[10:]).decode()
    assert text(events(client, run_id, **{"from": f"1:{after_ten}"})) == text(resumed)


def test_tail_starts_that_many_lines_before_the_end(client: TestClient) -> None:
    run_id = finished_run(runtime(client), b"".join(f"l{i}\n".encode() for i in range(10)))
    assert text(events(client, run_id, tail=3)) == "l7\nl8\nl9\n"
    assert text(events(client, run_id, tail=0)) == ""
    assert text(events(client, run_id, tail=99)).startswith("l0\n")


def test_a_retried_run_streams_each_attempt_after_an_attempt_event(client: TestClient) -> None:
    rt = runtime(client)
    run_id = finished_run(rt, b"first try\n", exit_code=1)
    force(rt, run_id, JobStatus.QUEUED)
    assert run_id in schedule(rt)
    report(rt, run_id, "running", attempt=2)
    log_of(rt, run_id, 2).write_bytes(b"second try\n")
    report(rt, run_id, "exited", attempt=2, exit_code=0)
    got = events(client, run_id)
    kinds = [k for k, _, _ in got]
    assert kinds == ["status", "log", "attempt", "log", "end"]
    assert (got[1][2], got[2][2], got[3][2]) == ("1:10", "2:0", "2:11")
    assert text(got) == "first try\nsecond try\n"
    assert text(events(client, run_id, headers={"Last-Event-ID": "1:10"})) == "second try\n"


def test_a_bad_event_id_and_an_unknown_run_are_clear_errors(client: TestClient) -> None:
    run_id = finished_run(runtime(client), b"x\n")
    bad = client.get(
        f"/runs/{run_id}/logs/stream", headers={**ALICE, "Last-Event-ID": "three:four"}
    )
    assert bad.status_code == 400 and "ATTEMPT:OFFSET" in bad.json()["hint"]
    assert client.get("/runs/r-nothere123/logs/stream", headers=ALICE).status_code == 404
    bob = {"Authorization": f"Bearer {TOKENS['bob']}"}
    assert client.get(f"/runs/{run_id}/logs/stream", headers=bob).status_code == 404


def test_a_follower_sends_lines_as_they_come_and_ends_with_the_run(rt: Runtime) -> None:
    run_id = running_run(rt)
    path = log_of(rt, run_id)
    path.write_bytes(b"")

    async def scenario() -> list[Any]:
        follower = logs.Follower(rt, member("alice"), run_id, 1, 0)
        gen = follower.events()
        seen = [await anext(gen)]  # the status
        path.write_bytes(b"a\npart")
        seen.append(await asyncio.wait_for(anext(gen), 30))
        with path.open("ab") as fh:
            fh.write(b"ial\nlast without newline")
        seen.append(await asyncio.wait_for(anext(gen), 30))
        # The follower holds no transaction while it waits: the runner's exit is recorded.
        await asyncio.to_thread(report, rt, run_id, "exited", exit_code=0)
        async for event in gen:
            seen.append(event)
        return seen

    seen = asyncio.run(scenario())
    kinds = [e.kind for e in seen]
    assert kinds[:3] == ["status", "log", "log"] and kinds[-1] == "end"
    texts = [e.payload.text for e in seen if isinstance(e.payload, StreamLog)]
    assert texts[:2] == ["a\n", "partial\n"]  # whole lines only while the run goes on
    assert "".join(texts) == "a\npartial\nlast without newline"
    assert jobs.get(rt, member("alice"), run_id).status == JobStatus.SUCCEEDED


def test_a_queued_run_is_followed_until_it_starts(rt: Runtime) -> None:
    waiting = submit(rt).run_id  # no scheduler pass: it stays queued
    assert run_row(rt, waiting).status == JobStatus.QUEUED

    async def scenario() -> list[Any]:
        gen = logs.Follower(rt, member("alice"), waiting, 1, 0).events()
        first = await anext(gen)
        await asyncio.to_thread(actions.stop, rt, member("alice"), waiting)
        return [first, *[e async for e in gen]]

    seen = asyncio.run(scenario())
    assert isinstance(seen[0].payload, StreamStatus) and seen[0].payload.attempts == 0
    assert isinstance(seen[-1].payload, StreamEnd)
    assert seen[-1].payload.status == JobStatus.STOPPED


def test_reading_cuts_at_line_ends_and_a_huge_line_at_a_character_boundary(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"one\ntwo")
    assert logs.read_from(path, 0, complete=False) == ("one\n", 4)
    assert logs.read_from(path, 4, complete=True) == ("two", 7)
    path.write_bytes(b"a" + "é".encode() * logs.MAX_EVENT_BYTES)
    got, end = logs.read_from(path, 0, complete=False)
    assert end % 2 == 1 and "\ufffd" not in got
    assert logs.read_from(tmp_path / "missing", 0, complete=True) == ("", 0)
    assert logs.tail_offset(None, 5) == 0


TEXT = "aé€😀\u0301z"  # characters of 1, 2, 3, 4 and 2 bytes


def test_a_character_split_by_a_read_at_any_byte_is_sent_whole_after_the_next_read(
    tmp_path: Path,
) -> None:
    encoded = (TEXT * 2).encode()
    path = tmp_path / "log"
    for cut in range(1, len(encoded)):
        path.write_bytes(encoded[:cut])  # the runner has written up to here: no line end yet
        first, end = logs.read_from(path, 0, complete=False, limit=cut)
        assert encoded[:end].decode() == first  # only whole characters, nothing replaced
        path.write_bytes(encoded)  # the rest arrives, then the run ends
        rest, final = logs.read_from(path, end, complete=True)
        assert (first + rest, final) == (TEXT * 2, len(encoded)), cut


def test_the_follower_cuts_a_long_line_only_between_characters_whatever_the_event_size(
    rt: Runtime,
) -> None:
    content = (TEXT * 5).encode() + b"\nend"
    run_id = finished_run(rt, content)

    async def follow(size: int) -> list[logs.StreamEvent]:
        follower = logs.Follower(rt, member("alice"), run_id, 1, 0, max_event_bytes=size)
        return [e async for e in follower.events()]

    for size in range(1, 12):
        seen = asyncio.run(follow(size))
        logged = [(e.id or "", e.payload) for e in seen if isinstance(e.payload, StreamLog)]
        assert "".join(p.text for _, p in logged) == content.decode(), size
        for event_id, p in logged:  # each event ends on a character boundary of the file
            end = int(event_id.split(":")[1])
            assert content[:end].decode().endswith(p.text)
        assert seen[-1].kind == "end" and seen[-1].id == f"1:{len(content)}"


# ---- runs on several nodes ----------------------------------------------------------------------

NODE0 = b"rank 0 starts\nstep 1\nstep 2\nsaved checkpoint-2\n"
NODE1 = "rank 1 starts\ncaf\u00e9 \u20ac\nNCCL error: unhandled system error\nno newline".encode()


def two_node_run(rt: Runtime, node0: bytes = NODE0, node1: bytes = NODE1, end: bool = True) -> str:
    run_id = running_run(rt, profiles=["h200:16"])
    first = log_of(rt, run_id)
    first.write_bytes(node0)
    (first.parent / "attempt-1.node-1.log").write_bytes(node1)
    if end:
        report(rt, run_id, "exited", rank=1, exit_code=1)
        report(rt, run_id, "exited", rank=0, exit_code=0)
        assert JobStatus(run_row(rt, run_id).status).is_terminal
    return run_id


def by_node(seen: list[logs.StreamEvent]) -> dict[int, str]:
    """Each node's text as the stream sent it (labels included), in the order it was sent."""
    texts: dict[int, str] = {}
    for e in seen:
        if isinstance(e.payload, StreamLog):
            texts[e.payload.node] = texts.get(e.payload.node, "") + e.payload.text
    return texts


def follow_from(
    rt: Runtime, run_id: str, position: str | None = None, size: int = logs.MAX_EVENT_BYTES
) -> list[logs.StreamEvent]:
    start = logcursor.parse(position) if position else logcursor.LogPosition(1)

    async def follow() -> list[logs.StreamEvent]:
        follower = logs.Follower(
            rt, member("alice"), run_id, start.attempt, start.offsets, max_event_bytes=size
        )
        return [e async for e in follower.events()]

    return asyncio.run(follow())


def test_a_two_node_runs_stream_labels_node_1s_lines_and_its_ids_carry_both_offsets(
    client: TestClient,
) -> None:
    run_id = two_node_run(runtime(client))
    got = events(client, run_id)
    assert text(got) == (
        NODE0.decode() + "[node 1] rank 1 starts\n[node 1] caf\u00e9 \u20ac\n"
        "[node 1] NCCL error: unhandled system error\n[node 1] no newline\n"
    )
    assert [(d["node"], i) for k, d, i in got if k == "log"] == [
        (0, f"1:{len(NODE0)},0"),
        (1, f"1:{len(NODE0)},{len(NODE1)}"),
    ]
    assert got[-1][0] == "end" and got[-1][2] == f"1:{len(NODE0)},{len(NODE1)}"


def test_resuming_a_two_node_stream_after_any_event_neither_repeats_nor_drops_a_line(
    rt: Runtime,
) -> None:
    run_id = two_node_run(rt)
    whole = {0: NODE0.decode(), 1: logcursor.label(NODE1.decode() + "\n", 1)}
    for size in (5, 9, 64):  # events that cut lines (and characters) at many places
        seen = follow_from(rt, run_id, size=size)
        assert by_node(seen) == whole, size
        cuts = [i for i, e in enumerate(seen) if e.id is not None]
        for i in cuts:  # a client that saw events up to i reconnects with i's id
            resumed = follow_from(rt, run_id, seen[i].id, size=size)
            before, after = by_node(seen[: i + 1]), by_node(resumed)
            for node, expected in whole.items():
                assert before.get(node, "") + after.get(node, "") == expected, (size, i)
            assert resumed[-1].kind == "end" and resumed[-1].id == seen[-1].id


def test_an_id_of_one_offset_resumes_node_0_there_and_the_other_nodes_from_their_start(
    client: TestClient,
) -> None:
    # What a client sends that saw this run before its server labelled nodes (or ?from=1:N).
    run_id = two_node_run(runtime(client))
    got = events(client, run_id, headers={"Last-Event-ID": "1:14"})
    assert text(got).startswith("step 1\nstep 2\nsaved checkpoint-2\n[node 1] rank 1 starts\n")
    assert got[-1][2] == f"1:{len(NODE0)},{len(NODE1)}"


def test_following_one_node_sends_its_lines_alone_and_unlabelled(client: TestClient) -> None:
    run_id = two_node_run(runtime(client))
    got = events(client, run_id, node=1)
    assert text(got) == NODE1.decode()
    assert got[-1][2] == f"1:0,{len(NODE1)}"
    assert text(events(client, run_id, node=1, tail=1)) == "no newline"
    assert text(events(client, run_id, node=0, tail=2)) == "step 2\nsaved checkpoint-2\n"
    missing = client.get(f"/runs/{run_id}/logs/stream", headers=ALICE, params={"node": 2})
    assert missing.status_code == 404 and "--node" in missing.json()["hint"]


def test_a_tail_of_a_two_node_run_is_the_last_lines_of_each_node(client: TestClient) -> None:
    run_id = two_node_run(runtime(client))
    assert text(events(client, run_id, tail=1)) == ("saved checkpoint-2\n[node 1] no newline\n")


def test_a_live_two_node_stream_sends_each_nodes_lines_as_they_come_labelled(
    rt: Runtime,
) -> None:
    run_id = two_node_run(rt, b"", b"", end=False)
    first = log_of(rt, run_id)
    second = first.parent / "attempt-1.node-1.log"

    async def scenario() -> list[logs.StreamEvent]:
        gen = logs.Follower(rt, member("alice"), run_id, 1, 0).events()
        seen = [await anext(gen)]  # the status
        second.write_bytes(b"rank 1 up\nhalf")
        seen.append(await asyncio.wait_for(anext(gen), 30))
        first.write_bytes(b"rank 0 up\n")
        seen.append(await asyncio.wait_for(anext(gen), 30))
        with second.open("ab") as fh:
            fh.write(b" a line\n")
        seen.append(await asyncio.wait_for(anext(gen), 30))
        await asyncio.to_thread(report, rt, run_id, "exited", rank=1, exit_code=0)
        await asyncio.to_thread(report, rt, run_id, "exited", rank=0, exit_code=0)
        return seen + [e async for e in gen]

    seen = asyncio.run(scenario())
    logged = [
        (e.payload.node, e.payload.text, e.id) for e in seen if isinstance(e.payload, StreamLog)
    ]
    assert logged == [
        (1, "[node 1] rank 1 up\n", "1:0,10"),
        (0, "rank 0 up\n", "1:10,10"),
        (1, "[node 1] half a line\n", "1:10,22"),
    ]
    assert seen[-1].kind == "end" and seen[-1].id == "1:10,22"


def test_a_retried_two_node_runs_next_attempt_starts_every_node_at_zero(
    client: TestClient,
) -> None:
    rt = runtime(client)
    run_id = two_node_run(rt)
    force(rt, run_id, JobStatus.QUEUED)
    assert run_id in schedule(rt)
    for rank in (1, 0):
        report(rt, run_id, "exited", attempt=2, rank=rank, exit_code=0)
    log_of(rt, run_id, 2).parent.joinpath("attempt-2.node-1.log").write_bytes(b"again\n")
    got = events(client, run_id, headers={"Last-Event-ID": f"1:{len(NODE0)},{len(NODE1)}"})
    assert [(k, i) for k, _, i in got if k != "status"] == [
        ("attempt", "2:0,0"),
        ("log", "2:0,6"),
        ("end", "2:0,6"),
    ]
    assert text(got) == "[node 1] again\n"
