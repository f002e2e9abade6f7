"""Reading logs: whole lines while a run goes on, everything once it is over, long-polling."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from starforge.contract.errors import NotFound
from starforge.server.runtime import Runtime
from starforge.server.services.observability import logs
from starforge.server.services.runs import actions

from .factories import member, report, run_row, running_run, submit


def log_file(rt: Runtime, run_id: str) -> Path:
    return Path(run_row(rt, run_id).attempts[-1].log_path)


def read(rt: Runtime, run_id: str, **kw: object) -> logs.LogChunk:
    return asyncio.run(logs.read(rt, member("alice"), run_id, **kw))  # type: ignore[arg-type]


def test_a_running_log_is_read_up_to_its_last_whole_line(rt: Runtime) -> None:
    run_id = running_run(rt)
    log_file(rt, run_id).write_bytes(b"step 1\nstep 2\nstep")
    chunk = read(rt, run_id)
    assert (chunk.data, chunk.offset, chunk.final, chunk.attempt) == (
        "step 1\nstep 2\n",
        14,
        False,
        1,
    )
    assert read(rt, run_id, offset=14).data == ""


def test_the_rest_is_read_once_the_run_is_over_and_then_it_is_final(rt: Runtime) -> None:
    run_id = running_run(rt)
    log_file(rt, run_id).write_bytes(b"step 1\ndone")
    report(rt, run_id, "exited", exit_code=0)
    chunk = read(rt, run_id, offset=7)
    assert (chunk.data, chunk.offset, chunk.final, chunk.status) == ("done", 11, True, "succeeded")


def test_a_big_log_comes_in_chunks_of_at_most_one_mebibyte(rt: Runtime) -> None:
    run_id = running_run(rt)
    line = b"x" * 1023 + b"\n"
    log_file(rt, run_id).write_bytes(line * 1500)
    first = read(rt, run_id)
    assert len(first.data) <= logs.MAX_CHUNK and first.data.endswith("\n")
    second = read(rt, run_id, offset=first.offset)
    assert first.offset + len(second.data) == len(line) * 1500


def test_a_line_longer_than_a_chunk_is_cut_on_a_character_boundary(rt: Runtime) -> None:
    run_id = running_run(rt)
    log_file(rt, run_id).write_bytes(b"a" + "é".encode() * logs.MAX_CHUNK)
    chunk = read(rt, run_id)
    assert chunk.offset % 2 == 1 and "\ufffd" not in chunk.data


def test_a_queued_run_has_no_log_yet_and_a_stopped_one_is_final(rt: Runtime) -> None:
    run_id = submit(rt).run_id
    chunk = read(rt, run_id)
    assert (chunk.attempt, chunk.data, chunk.final) == (0, "", False)
    actions.stop(rt, member("alice"), run_id)
    assert read(rt, run_id).final


def test_an_attempt_that_does_not_exist_is_not_found(rt: Runtime) -> None:
    run_id = running_run(rt)
    with pytest.raises(NotFound):
        read(rt, run_id, attempt=2)


def test_a_long_poll_returns_as_soon_as_new_lines_arrive(rt: Runtime) -> None:
    run_id = running_run(rt)
    path = log_file(rt, run_id)
    path.write_bytes(b"")

    async def scenario() -> logs.LogChunk:
        reader = asyncio.create_task(logs.read(rt, member("alice"), run_id, wait=30))
        await asyncio.sleep(0.3)
        assert not reader.done()
        path.write_bytes(b"hello\n")
        return await reader

    chunk = asyncio.run(scenario())
    assert chunk.data == "hello\n"


def test_a_long_poll_ends_when_the_run_ends(rt: Runtime) -> None:
    run_id = running_run(rt)

    async def scenario() -> logs.LogChunk:
        reader = asyncio.create_task(logs.read(rt, member("alice"), run_id, wait=30))
        await asyncio.sleep(0.3)
        await asyncio.to_thread(report, rt, run_id, "exited", exit_code=0)
        return await reader

    assert asyncio.run(scenario()).final


def test_a_tail_read_starts_at_the_last_lines_of_a_long_log(rt: Runtime) -> None:
    run_id = running_run(rt)
    lines = [f"step {i}\n".encode() for i in range(200_000)]  # ~2 MB: many 64 KiB blocks back
    log_file(rt, run_id).write_bytes(b"".join(lines))
    chunk = read(rt, run_id, tail=3)
    assert chunk.data == "step 199997\nstep 199998\nstep 199999\n"
    assert chunk.offset == sum(len(line) for line in lines)


def test_a_tail_of_more_lines_than_the_log_has_is_the_whole_log(rt: Runtime) -> None:
    run_id = running_run(rt)
    log_file(rt, run_id).write_bytes(b"one\ntwo\n")
    assert read(rt, run_id, tail=10).data == "one\ntwo\n"
    assert read(rt, run_id, tail=0).data == ""


def test_tail_offset_counts_lines_across_block_boundaries(tmp_path: Path) -> None:
    path = tmp_path / "log"
    line = b"y" * 1000 + b"\n"
    path.write_bytes(line * 300 + b"partial")
    assert logs.tail_offset(path, 1) == len(line) * 300
    assert logs.tail_offset(path, 101) == len(line) * 200
    assert logs.tail_offset(path, 1000) == 0


def two_node_run(rt: Runtime, node0: bytes, node1: bytes) -> str:
    run_id = running_run(rt, profiles=["h200:16"])
    first = log_file(rt, run_id)
    first.write_bytes(node0)
    (first.parent / "attempt-1.node-1.log").write_bytes(node1)
    return run_id


def test_each_node_of_a_two_node_run_is_read_by_its_rank(rt: Runtime) -> None:
    run_id = two_node_run(rt, b"rank 0 up\n", b"rank 1 up\nNCCL error: unhandled\n")
    first = read(rt, run_id)
    assert (first.node, first.nodes, first.data) == (0, 2, "rank 0 up\n")
    second = read(rt, run_id, node=1)
    assert (second.node, second.nodes, second.data) == (1, 2, "rank 1 up\nNCCL error: unhandled\n")
    assert read(rt, run_id, node=1, tail=1).data == "NCCL error: unhandled\n"
    assert read(rt, run_id, node=1, offset=10).data == "NCCL error: unhandled\n"


def test_a_node_the_attempt_does_not_have_is_not_found_with_the_nodes_it_has(rt: Runtime) -> None:
    run_id = two_node_run(rt, b"", b"")
    with pytest.raises(NotFound, match="has no node 2: it ran on 2 nodes") as caught:
        read(rt, run_id, node=2)
    assert "--node takes 0 to 1" in (caught.value.hint or "")
    single = running_run(rt, profiles=["h100:8"])  # the h200 nodes are busy
    assert read(rt, single).nodes == 1
    with pytest.raises(NotFound, match="it ran on one node"):
        read(rt, single, node=1)
