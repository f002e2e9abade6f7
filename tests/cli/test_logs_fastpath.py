"""The grammar `sf job logs` takes its stdlib fast path for, and the strict HTTP answers it
reads; anything else goes to the full command (end to end: tests/integration/test_logs_fastpath)."""

from __future__ import annotations

import io

import pytest

from starforge.cli.fastpath import Fallback, _response, parse


@pytest.mark.parametrize(
    ("argv", "parsed"),
    [
        (["job", "logs", "r-7f3a", "-n", "5", "--no-follow"], ("r-7f3a", 5, None)),
        (["job", "logs", "--no-follow", "-n5", "r-7f"], ("r-7f", 5, None)),
        (["job", "logs", "r-7f3a", "--tail=12", "--no-follow"], ("r-7f3a", 12, None)),
        (["job", "logs", "--tail", "3", "--no-follow"], (None, 3, None)),
        (["job", "logs", "r-7f3a", "--no-follow"], ("r-7f3a", 2000, None)),  # the default
        (["job", "logs", "r-7f3a", "--node", "1", "--no-follow"], ("r-7f3a", 2000, 1)),
        (["job", "logs", "--node=0", "-n", "3", "--no-follow"], (None, 3, 0)),
    ],
)
def test_the_fast_path_takes_a_plain_no_follow_tail(
    argv: list[str], parsed: tuple[str | None, int, int | None]
) -> None:
    assert parse(argv) == parsed


@pytest.mark.parametrize(
    "argv",
    [
        ["job", "logs", "r-7f3a", "-n", "5"],  # following: the SSE stream, the full command's
        ["job", "logs", "r-7f3a", "-n", "0", "--no-follow"],  # every attempt, with separators
        ["job", "logs", "r-7f3a", "-n", "-1", "--no-follow"],
        ["job", "logs", "r-7f3a", "-n", "five", "--no-follow"],
        ["job", "logs", "r-7f3a", "-n"],
        ["job", "logs", "r-7f3a", "--json", "--no-follow"],
        ["--debug", "job", "logs", "r-7f3a", "--no-follow"],
        ["job", "logs", "r-7f3a", "r-8", "--no-follow"],
        ["job", "logs", "r/../x", "--no-follow"],
        ["job", "logs", "", "--no-follow"],  # the full command's own usage error
        ["job", "logs", "r-7f3a", "--no-follow", "--no-follow"],
        ["job", "logs", "r-7f3a", "--node", "-1", "--no-follow"],
        ["job", "logs", "r-7f3a", "--node", "01", "--no-follow"],
        ["job", "logs", "r-7f3a", "--node", "1", "--node", "2", "--no-follow"],
        ["job", "logs", "r-7f3a", "--no-follow", "--node"],
        ["job", "logs", "r-7f3a", "--node", "1"],  # following one node: the full command's
        ["job", "logs", "r-7f3a", "--no-follow", "--help"],
        ["job", "status", "r-7f3a"],
    ],
)
def test_anything_else_goes_to_the_full_command(argv: list[str]) -> None:
    assert parse(argv) is None


def test_an_answer_with_a_content_length_is_read_to_its_last_byte() -> None:
    wire = io.BytesIO(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nContent-Length: 2\r\n\r\n{}"
        b"HTTP/1.1 404 Not Found\r\n"
    )
    assert _response(wire) == (
        200,
        {"content-type": "application/json", "content-length": "2"},
        b"{}",
    )
    assert wire.readline() == b"HTTP/1.1 404 Not Found\r\n"  # the next answer stays unread


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}",  # the connection closed early
        b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{}",  # a body up to the close
        b"HTTP/1.1 200 OK\r\nContent-Len",  # cut inside the headers
        b"",
        b"SSH-2.0-OpenSSH_9.6\r\n",
    ],
)
def test_an_answer_it_does_not_fully_understand_is_a_fallback(answer: bytes) -> None:
    with pytest.raises(Fallback):
        _response(io.BytesIO(answer))
