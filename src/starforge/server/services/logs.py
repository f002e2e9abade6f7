"""Reading a run's logs: byte ranges with long-polling, and one follower for the SSE stream.

Logs are plain files written by the runners, so reading needs no lock and no database session
while waiting: the run's status is read in a short transaction, the file is read directly.

* Text: a read returns whole lines (a half-written line waits for its end) unless the log is over;
  a line longer than a read is cut at a character boundary: :func:`take` decodes with
  ``codecs``' incremental UTF-8 decoder, which keeps back a character split by the read, and the
  offset moves only past the bytes it decoded, so the next read starts on the held-back bytes.
* :func:`read` answers ``GET /runs/{ref}/logs``: a chunk from an offset, waiting up to ``wait``
  seconds for new bytes; ``final`` is true only when the run is terminal and every byte of its
  last attempt's log was returned.
* :class:`Follower` is the log stream (``GET /runs/{ref}/logs/stream``): a ``status`` event (and
  again whenever the status changes), ``log`` events of whole lines, an ``attempt`` event when a
  retry or resume starts a new attempt's log, and one ``end`` event once the run is final and
  every byte was sent. Every event after the status carries the id ``<attempt>:<offset after
  it>``, so a client resumes exactly after the last event it saw. It holds no database session
  while it waits: the status is read at most every ``STATUS_POLL_S``, the file is ``stat``-ed
  every ``FOLLOW_POLL_S`` and read in a worker thread only when it grew. A queued run's reason is
  the scheduler's latest pass's (:mod:`starforge.server.services.queue`), never a plan of its own.
"""

from __future__ import annotations

import asyncio
import codecs
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from starforge.contract.api import (
    SSE_ATTEMPT,
    SSE_END,
    SSE_LOG,
    SSE_STATUS,
    LogChunk,
    StreamAttempt,
    StreamEnd,
    StreamLog,
    StreamPayload,
    StreamStatus,
)
from starforge.contract.errors import NotFound, UsageError
from starforge.contract.states import EndReason, JobStatus
from starforge.server.runtime import Runtime
from starforge.server.services import jobs, queue

MAX_CHUNK = 1 << 20  # bytes per long-poll answer
MAX_EVENT_BYTES = 256 * 1024  # bytes per log event of the stream
MIN_READ = 4  # the longest UTF-8 character: a read of fewer bytes might decode nothing
MAX_WAIT_S = 30.0
FILE_POLL_S = 0.2
FOLLOW_POLL_S = 0.05
STATUS_POLL_S = 1.0


@dataclass(frozen=True)
class Target:
    run_id: str
    status: JobStatus
    attempt: int  # 0 while the run has no attempt yet
    attempts: int
    path: Path | None
    reason: str = ""  # as stored on the run
    end_reason: EndReason | None = None
    exit_code: int | None = None

    @property
    def is_last_and_over(self) -> bool:
        return self.status.is_terminal and self.attempt == self.attempts


def locate(rt: Runtime, user: str, ref: str, attempt: int | None) -> Target:
    with rt.transaction() as session:
        run = jobs.resolve(session, user, ref)
        count = run.current_attempt
        number = count if attempt is None else attempt
        if number < 0 or number > count or (attempt is not None and number == 0):
            raise NotFound(
                f"run {run.id} has no attempt {attempt} (it has {count})",
                hint="omit --attempt to read the latest one",
                details={"attempts": count},
            )
        row = run.attempt(number) if number else None
        path = Path(row.log_path) if row is not None and row.log_path else None
        return Target(
            run.id,
            JobStatus(run.status),
            number,
            count,
            path,
            reason=run.reason,
            end_reason=EndReason(run.end_reason) if run.end_reason else None,
            exit_code=run.exit_code,
        )


# ---- bytes to text -------------------------------------------------------------------------------


def take(data: bytes, *, limit: int, complete: bool) -> tuple[str, int]:
    """The text to send from ``data`` (read with at most ``limit`` bytes) and how many bytes it
    used: everything when ``complete`` (the log is over and ``data`` reaches its end), else the
    whole lines, else (one line fills the read) the whole characters."""
    if complete:
        return data.decode("utf-8", errors="replace"), len(data)
    newline = data.rfind(b"\n")
    if newline >= 0:
        return data[: newline + 1].decode("utf-8", errors="replace"), newline + 1
    if len(data) < limit:
        return "", 0  # a partial line: wait until it ends
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    text = decoder.decode(data, final=False)
    held, _ = decoder.getstate()  # the start of a character the read split
    return text, len(data) - len(held)


def read_from(
    path: Path | None, offset: int, *, complete: bool, limit: int = MAX_EVENT_BYTES
) -> tuple[str, int]:
    """Text from ``offset`` and the offset after it; ``complete``: the log will not grow."""
    if path is None:
        return "", offset
    limit = max(limit, MIN_READ)
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read(limit)
    except FileNotFoundError:
        return "", offset
    text, used = take(data, limit=limit, complete=complete and len(data) < limit)
    return text, offset + used


def tail_offset(path: Path | None, lines: int) -> int:
    """The offset where the last ``lines`` whole lines of the file begin (its size for 0).

    Reads backwards from the end in blocks: the cost is the tail's size, not the log's."""
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
            cut = len(chunk)
            while (cut := chunk.rfind(b"\n", 0, cut)) >= 0:
                seen += 1
                if seen == lines:
                    return start + cut + 1
            pos = start
    return 0


# ---- long-polling reads --------------------------------------------------------------------------


def read_range(target: Target, offset: int) -> LogChunk:
    size = target.path.stat().st_size if target.path and target.path.exists() else 0
    start = min(max(offset, 0), size)
    data = b""
    if target.path is not None and size > start:
        with open(target.path, "rb") as fh:
            fh.seek(start)
            data = fh.read(min(MAX_CHUNK, size - start))
    reaches_end = start + len(data) >= size
    complete = target.is_last_and_over and reaches_end
    text, used = take(data, limit=MAX_CHUNK, complete=complete)
    end = start + used
    return LogChunk(
        attempt=target.attempt,
        offset=end,
        data=text,
        final=target.is_last_and_over and end >= size,
        status=target.status,
        attempts=target.attempts,
    )


async def read(
    rt: Runtime,
    user: str,
    ref: str,
    *,
    attempt: int | None = None,
    offset: int = 0,
    wait: float = 0.0,
    tail: int | None = None,
) -> LogChunk:
    """A chunk from ``offset`` (with ``tail``: from where the last ``tail`` lines begin, found
    by reading back from the end); with ``wait`` > 0, wait up to that long for new bytes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + min(max(wait, 0.0), MAX_WAIT_S)
    target = await asyncio.to_thread(locate, rt, user, ref, attempt)
    if tail is not None:
        offset = await asyncio.to_thread(tail_offset, target.path, tail)
    checked = loop.time()
    while True:
        chunk = await asyncio.to_thread(read_range, target, offset)
        now = loop.time()
        if chunk.data or chunk.final or now >= deadline:
            return chunk
        await asyncio.sleep(min(FILE_POLL_S, deadline - now))
        if loop.time() - checked >= STATUS_POLL_S:
            # The run may have ended, or its first attempt started, while we waited.
            target = await asyncio.to_thread(locate, rt, user, ref, attempt)
            checked = loop.time()


# ---- the stream ----------------------------------------------------------------------------------


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


async def start_position(
    rt: Runtime, user: str, ref: str, position: str | None, tail: int | None
) -> tuple[Target, int, int]:
    """The run (NotFound before anything streams) and where its stream starts: after the event
    ``position`` names, else ``tail`` lines before the end, else the first attempt's start."""
    target = await asyncio.to_thread(locate, rt, user, ref, None)
    if position:
        attempt, offset = parse_position(position)
    elif tail is not None and target.attempt:
        attempt = target.attempt
        offset = await asyncio.to_thread(tail_offset, target.path, tail)
    else:
        attempt, offset = 1, 0
    return target, attempt, offset


@dataclass(frozen=True)
class StreamEvent:
    kind: str  # one of the SSE_* event names
    payload: StreamPayload
    id: str | None = None  # "<attempt>:<offset>"; the status event has none


class Follower:
    """The state of one stream: where it is, and the run as last read."""

    def __init__(
        self,
        rt: Runtime,
        user: str,
        run_id: str,
        attempt: int,
        offset: int,
        *,
        max_event_bytes: int = MAX_EVENT_BYTES,
    ) -> None:
        self.rt, self.user, self.run_id = rt, user, run_id
        self.attempt, self.offset = attempt, offset
        self.max_event_bytes = max_event_bytes
        self.paths: dict[int, Path | None] = {}

    async def refresh(self) -> Target:
        return await asyncio.to_thread(locate, self.rt, self.user, self.run_id, None)

    async def path(self, attempt: int) -> Path | None:
        if attempt not in self.paths:
            found = await asyncio.to_thread(locate, self.rt, self.user, self.run_id, attempt)
            self.paths[attempt] = found.path
        return self.paths[attempt]

    async def status_event(self, target: Target) -> StreamEvent:
        reason = queue.reason_of(self.rt, target.run_id, target.status, target.reason)
        reason = await asyncio.to_thread(jobs.hide_others_in, self.rt, self.user, reason)
        payload = StreamStatus(status=target.status, reason=reason, attempts=target.attempts)
        return StreamEvent(SSE_STATUS, payload)

    async def end_event(self) -> StreamEvent:
        target = await self.refresh()
        payload = StreamEnd(
            status=target.status, end_reason=target.end_reason, exit_code=target.exit_code
        )
        return StreamEvent(SSE_END, payload, f"{self.attempt}:{self.offset}")

    async def events(self) -> AsyncIterator[StreamEvent]:
        loop = asyncio.get_running_loop()
        target = await self.refresh()
        yield await self.status_event(target)
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
                    payload = StreamAttempt(attempt=self.attempt)
                    yield StreamEvent(SSE_ATTEMPT, payload, f"{self.attempt}:0")
                    continue
                if over:
                    yield await self.end_event()
                    return
            await asyncio.sleep(FOLLOW_POLL_S)
            if loop.time() - checked >= STATUS_POLL_S:
                before = target.status
                target = await self.refresh()
                checked = loop.time()
                if target.status != before:
                    yield await self.status_event(target)

    async def _next_chunk(self, over: bool) -> StreamEvent | None:
        path = await self.path(self.attempt)
        try:
            size = os.stat(path).st_size if path is not None else 0
        except FileNotFoundError:
            size = 0
        if size <= self.offset:
            return None
        text, end = await asyncio.to_thread(
            read_from, path, self.offset, complete=over, limit=self.max_event_bytes
        )
        if end == self.offset:
            return None
        self.offset = end
        payload = StreamLog(attempt=self.attempt, text=text)
        return StreamEvent(SSE_LOG, payload, f"{self.attempt}:{self.offset}")
