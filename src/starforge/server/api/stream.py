"""A run's log over Server-Sent Events, resumable by event id, ending when the run ends.

``GET /runs/{ref}/logs/stream`` sends, in order: a ``status`` event (and again whenever the status
changes), ``log`` events carrying whole lines of the current attempt's log, an ``attempt`` event
when a retry or resume starts a new attempt's log, and one ``end`` event once the run is final and
every byte of its last attempt was sent; then the stream closes. Keep-alive comments go out every
``PING_S`` seconds while nothing else does.

Every event's id is ``<attempt>:<byte offset after it>``. A client that reconnects with
``Last-Event-ID`` (or ``?from=``) resumes exactly after the last event it saw: no line is sent
twice and none is skipped. Without either, ``?tail=N`` starts N lines before the end of the
current attempt, and by default the stream starts at the beginning of the first attempt.

A follower holds no database session and no scheduler resource while it waits: the run's status
is read in a short transaction at most every ``STATUS_POLL_S``, the log file is polled with a
``stat`` every ``FILE_POLL_S`` and read in a worker thread only when it grew.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Header, Query
from sse_starlette import EventSourceResponse, ServerSentEvent

from starforge.contract.api import (
    SSE_ATTEMPT,
    SSE_END,
    SSE_LOG,
    SSE_STATUS,
    StreamAttempt,
    StreamEnd,
    StreamLog,
    StreamStatus,
)
from starforge.contract.errors import UsageError
from starforge.server.api.deps import RuntimeDep, UserDep
from starforge.server.runtime import Runtime
from starforge.server.services import jobs, logs

router = APIRouter()

FILE_POLL_S = 0.05
STATUS_POLL_S = 1.0
PING_S = 10.0
MAX_EVENT_BYTES = 256 * 1024
RETRY_MS = 1000


def parse_position(text: str) -> tuple[int, int]:
    """``"3:1024"`` -> (3, 1024): attempt 3, byte offset 1024."""
    attempt, sep, offset = text.strip().partition(":")
    try:
        parsed = (int(attempt), int(offset))
    except ValueError:
        parsed = (-1, -1)
    if not sep or parsed[0] < 1 or parsed[1] < 0:
        raise UsageError(
            f"invalid log position {text!r}",
            hint="an event id looks like ATTEMPT:OFFSET, e.g. 1:2048",
        )
    return parsed


def _utf8_end(data: bytes) -> int:
    """The length of ``data`` without a trailing incomplete UTF-8 character."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:
            continue  # a continuation byte: keep looking for the lead byte
        need = 1 if byte < 0x80 else 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4
        return len(data) - back if need > back else len(data)
    return len(data)


def read_from(path: Path | None, offset: int, *, complete: bool) -> tuple[str, int]:
    """Text from ``offset`` and the offset after it: whole lines only unless ``complete``."""
    if path is None:
        return "", offset
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read(MAX_EVENT_BYTES)
    except FileNotFoundError:
        return "", offset
    if not complete or len(data) == MAX_EVENT_BYTES:
        newline = data.rfind(b"\n")
        if newline >= 0:
            data = data[: newline + 1]
        elif len(data) == MAX_EVENT_BYTES:
            data = data[: _utf8_end(data)]  # one line longer than an event: cut it
        else:
            data = b""  # a partial line: wait for its end
    return data.decode("utf-8", errors="replace"), offset + len(data)


def tail_offset(path: Path | None, lines: int) -> int:
    """The offset where the last ``lines`` whole lines of the file begin (its size for 0)."""
    if path is None or not path.exists():
        return 0
    size = path.stat().st_size
    if lines <= 0:
        return size
    with open(path, "rb") as fh:
        end, seen, block = size, 0, 64 * 1024
        fh.seek(max(size - 1, 0))
        if size and fh.read(1) == b"\n":
            end = size - 1  # the final newline ends the last line; it does not start one
        pos = end
        while pos > 0:
            start = max(pos - block, 0)
            fh.seek(start)
            chunk = fh.read(pos - start)
            for i in range(len(chunk) - 1, -1, -1):
                if chunk[i] == 0x0A:
                    seen += 1
                    if seen == lines:
                        return start + i + 1
            pos = start
    return 0


class Follower:
    """The state of one stream: where it is, and the run as last read."""

    def __init__(self, rt: Runtime, user: str, run_id: str, attempt: int, offset: int) -> None:
        self.rt, self.user, self.run_id = rt, user, run_id
        self.attempt, self.offset = attempt, offset
        self.paths: dict[int, Path | None] = {}
        self.target: logs.Target | None = None

    async def refresh(self) -> logs.Target:
        self.target = await asyncio.to_thread(logs.locate, self.rt, self.user, self.run_id, None)
        return self.target

    async def path(self, attempt: int) -> Path | None:
        if attempt not in self.paths:
            found = await asyncio.to_thread(logs.locate, self.rt, self.user, self.run_id, attempt)
            self.paths[attempt] = found.path
        return self.paths[attempt]

    def status_event(self, target: logs.Target, reason: str) -> ServerSentEvent:
        payload = StreamStatus(status=target.status, reason=reason, attempts=target.attempts)
        return ServerSentEvent(payload.model_dump_json(), event=SSE_STATUS, retry=RETRY_MS)

    async def reason(self) -> str:
        view = await asyncio.to_thread(jobs.get, self.rt, self.user, self.run_id)
        return view.reason

    async def end_event(self) -> ServerSentEvent:
        view = await asyncio.to_thread(jobs.get, self.rt, self.user, self.run_id)
        payload = StreamEnd(
            status=view.status, end_reason=view.end_reason, exit_code=view.exit_code
        )
        return ServerSentEvent(
            payload.model_dump_json(), event=SSE_END, id=f"{self.attempt}:{self.offset}"
        )

    async def events(self) -> AsyncIterator[ServerSentEvent]:
        loop = asyncio.get_running_loop()
        target = await self.refresh()
        yield self.status_event(target, await self.reason())
        checked = loop.time()
        while True:
            if target.attempts == 0:
                if target.status.is_terminal:
                    yield await self.end_event()
                    return
            else:
                self.attempt = min(max(self.attempt, 1), target.attempts)
                over = self.attempt < target.attempts or target.status.is_terminal
                event = await self._next_chunk(over)
                if event is not None:
                    yield event
                    continue
                if over and self.attempt < target.attempts:
                    self.attempt, self.offset = self.attempt + 1, 0
                    yield ServerSentEvent(
                        StreamAttempt(attempt=self.attempt).model_dump_json(),
                        event=SSE_ATTEMPT,
                        id=f"{self.attempt}:0",
                    )
                    continue
                if over:
                    yield await self.end_event()
                    return
            await asyncio.sleep(FILE_POLL_S)
            if loop.time() - checked >= STATUS_POLL_S:
                before = target.status
                target = await self.refresh()
                checked = loop.time()
                if target.status != before:
                    yield self.status_event(target, await self.reason())

    async def _next_chunk(self, over: bool) -> ServerSentEvent | None:
        path = await self.path(self.attempt)
        try:
            size = os.stat(path).st_size if path is not None else 0
        except FileNotFoundError:
            size = 0
        if size <= self.offset:
            return None
        text, end = await asyncio.to_thread(read_from, path, self.offset, complete=over)
        if end == self.offset:
            return None
        self.offset = end
        return ServerSentEvent(
            StreamLog(attempt=self.attempt, text=text).model_dump_json(),
            event=SSE_LOG,
            id=f"{self.attempt}:{self.offset}",
        )


@router.get("/runs/{ref}/logs/stream")
async def stream_logs(
    ref: str,
    rt: RuntimeDep,
    user: UserDep,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
    from_: Annotated[str | None, Query(alias="from")] = None,
    tail: Annotated[int | None, Query(ge=0)] = None,
) -> EventSourceResponse:
    """Follow a run's log as Server-Sent Events until the run ends."""
    target = await asyncio.to_thread(logs.locate, rt, user, ref, None)  # 404 before streaming
    position = last_event_id or from_
    if position:
        attempt, offset = parse_position(position)
    elif tail is not None and target.attempt:
        attempt = target.attempt
        offset = await asyncio.to_thread(tail_offset, target.path, tail)
    else:
        attempt, offset = 1, 0
    follower = Follower(rt, user, target.run_id, attempt, offset)
    return EventSourceResponse(
        follower.events(),
        ping=PING_S,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
