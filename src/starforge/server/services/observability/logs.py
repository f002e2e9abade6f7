"""Reading a run's logs: byte ranges with long-polling, and one follower for the SSE stream.

Logs are plain files written by the runners, one per node of each attempt (node 0's is the
attempt's ``log_path``; node r's sits beside it, :meth:`RunLayout.log`), so reading needs no lock
and no database session while waiting: the run's status is read in a short transaction, the files
are read directly. An attempt has as many nodes as its allocation has slots.

* Text: a read returns whole lines (a half-written line waits for its end) unless the log is over;
  a line longer than a read is cut at a character boundary: :func:`take` decodes with
  ``codecs``' incremental UTF-8 decoder, which keeps back a character split by the read, and the
  offset moves only past the bytes it decoded, so the next read starts on the held-back bytes.
* :func:`read` answers ``GET /runs/{ref}/logs``: a chunk of one node's log (``node``, 0 by
  default) from an offset, waiting up to ``wait`` seconds for new bytes; ``final`` is true only
  when the run is terminal and every byte of that node's log of its last attempt was returned.
  The chunk says how many nodes the attempt has, so a client reads each and merges them
  (:func:`starforge.contract.logcursor.merge`).
* :class:`Follower` is the log stream (``GET /runs/{ref}/logs/stream``): a ``status`` event (and
  again whenever the status changes), ``log`` events of whole lines of one node each (a node r >
  0's lines labelled ``[node r]`` unless the stream follows that one node alone), an ``attempt``
  event when a retry or resume starts a new attempt's log, and one ``end`` event once the run is
  final and every byte of every node was sent. Every event after the status carries the stream's
  position after it as its id, one offset per node (:mod:`starforge.contract.logcursor`:
  ``<attempt>:<offset>`` for a single-node attempt, as before), so a client resumes exactly after
  the last event it saw, whichever node it came from. Nodes are read in turn, so a chatty node
  does not hold back the others; a line cut by a read is continued before another node's. It
  holds no database session while it waits: the status is read at most every ``STATUS_POLL_S``,
  the files are ``stat``-ed every ``FOLLOW_POLL_S`` and read in a worker thread only when one
  grew. A queued run's reason is the scheduler's latest pass's
  (:mod:`starforge.server.services.scheduling.queue`), never a plan of its own.
"""

from __future__ import annotations

import asyncio
import codecs
import os
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from starforge.contract import logcursor
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
from starforge.contract.layout import RunLayout
from starforge.contract.logcursor import LogPosition
from starforge.contract.states import EndReason, JobStatus
from starforge.server.db.models import Attempt
from starforge.server.runtime import Runtime
from starforge.server.services.access import users
from starforge.server.services.runs import jobs
from starforge.server.services.scheduling import queue

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
    paths: tuple[Path | None, ...] = (None,)  # every node's log of the attempt, by rank
    reason: str = ""  # as stored on the run
    end_reason: EndReason | None = None
    exit_code: int | None = None

    @property
    def path(self) -> Path | None:
        """Node 0's log."""
        return self.paths[0]

    @property
    def nodes(self) -> int:
        return len(self.paths)

    def path_of(self, node: int) -> Path | None:
        return self.paths[node] if node < len(self.paths) else None

    @property
    def is_last_and_over(self) -> bool:
        return self.status.is_terminal and self.attempt == self.attempts


def node_paths(row: Attempt | None) -> tuple[Path | None, ...]:
    """Every node's log file of an attempt, by rank; ``(None,)`` when it has none yet."""
    if row is None or not row.log_path:
        return (None,)
    first = Path(row.log_path)  # <run dir>/logs/attempt-<n>.log, as dispatch wrote it
    nodes = max(len(row.allocation or []), len(row.nodes or {}), 1)
    layout = RunLayout(first.parent.parent)
    return (first, *(layout.log(row.number, rank) for rank in range(1, nodes)))


def locate(rt: Runtime, user: users.Caller, ref: str, attempt: int | None, node: int = 0) -> Target:
    """The run, its attempt (the latest by default) and its nodes' logs; NotFound for an
    attempt or a node (of an attempt that started) that does not exist."""
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
        paths = node_paths(row)
        if row is not None and node >= len(paths):
            ran = "one node" if len(paths) == 1 else f"{len(paths)} nodes"
            raise NotFound(
                f"attempt {number} of run {run.id} has no node {node}: it ran on {ran}",
                hint=f"--node takes 0 to {len(paths) - 1}, or omit it to show every node",
                details={"nodes": len(paths)},
            )
        return Target(
            run.id,
            JobStatus(run.status),
            number,
            count,
            paths,
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


def read_range(target: Target, offset: int, node: int = 0) -> LogChunk:
    path = target.path_of(node)
    size = path.stat().st_size if path is not None and path.exists() else 0
    start = min(max(offset, 0), size)
    data = b""
    if path is not None and size > start:
        with open(path, "rb") as fh:
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
        node=node,
        nodes=target.nodes,
    )


async def read(
    rt: Runtime,
    user: users.Caller,
    ref: str,
    *,
    attempt: int | None = None,
    offset: int = 0,
    wait: float = 0.0,
    tail: int | None = None,
    node: int = 0,
) -> LogChunk:
    """A chunk of ``node``'s log from ``offset`` (with ``tail``: from where its last ``tail``
    lines begin, found by reading back from the end); with ``wait`` > 0, wait up to that long
    for new bytes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + min(max(wait, 0.0), MAX_WAIT_S)
    target = await asyncio.to_thread(locate, rt, user, ref, attempt, node)
    if tail is not None:
        offset = await asyncio.to_thread(tail_offset, target.path_of(node), tail)
    checked = loop.time()
    while True:
        chunk = await asyncio.to_thread(read_range, target, offset, node)
        now = loop.time()
        if chunk.data or chunk.final or now >= deadline:
            return chunk
        await asyncio.sleep(min(FILE_POLL_S, deadline - now))
        if loop.time() - checked >= STATUS_POLL_S:
            # The run may have ended, or its first attempt started, while we waited.
            target = await asyncio.to_thread(locate, rt, user, ref, attempt, node)
            checked = loop.time()


# ---- the stream ----------------------------------------------------------------------------------


def parse_position(text: str) -> LogPosition:
    """``"3:1024"`` -> attempt 3, node 0 at byte 1024; ``"3:1024,80"``: node 1 at 80 too."""
    try:
        return logcursor.parse(text)
    except ValueError:
        raise UsageError(f"invalid log position {text!r}", hint=logcursor.HINT) from None


async def start_position(
    rt: Runtime,
    user: users.Caller,
    ref: str,
    position: str | None,
    tail: int | None,
    node: int | None = None,
) -> tuple[Target, LogPosition]:
    """The run (NotFound before anything streams, as for a ``node`` its attempt lacks) and where
    its stream starts: after the event ``position`` names, else ``tail`` lines before the end of
    each node's log (of ``node``'s alone when given), else the first attempt's start."""
    target = await asyncio.to_thread(locate, rt, user, ref, None, node or 0)
    if position:
        return target, parse_position(position)
    if tail is not None and target.attempt:
        shown = range(target.nodes) if node is None else (node,)

        def offsets() -> list[int]:
            return [
                tail_offset(target.path_of(r), tail) if r in shown else 0
                for r in range(target.nodes)
            ]

        return target, LogPosition(target.attempt, await asyncio.to_thread(offsets))
    return target, LogPosition(1)


def starts_line(path: Path | None, offset: int) -> bool:
    """Whether ``offset`` of the file is the start of a line."""
    if offset <= 0 or path is None:
        return True
    try:
        with open(path, "rb") as fh:
            fh.seek(offset - 1)
            return fh.read(1) in (b"\n", b"")
    except FileNotFoundError:
        return True


@dataclass(frozen=True)
class StreamEvent:
    kind: str  # one of the SSE_* event names
    payload: StreamPayload
    id: str | None = None  # the stream's position after it (logcursor); the status event has none


class Follower:
    """The state of one stream: where it is (one offset per node), and the run as last read.

    ``node``: follow that node alone (unlabelled), else every node of each attempt."""

    def __init__(
        self,
        rt: Runtime,
        user: users.Caller,
        run_id: str,
        attempt: int,
        offset: int | Sequence[int] = 0,
        *,
        node: int | None = None,
        max_event_bytes: int = MAX_EVENT_BYTES,
    ) -> None:
        self.rt, self.user, self.run_id = rt, user, run_id
        self.position = LogPosition(attempt, [offset] if isinstance(offset, int) else offset)
        self.node = node
        self.max_event_bytes = max_event_bytes
        self.paths: dict[int, tuple[Path | None, ...]] = {}
        self.next_node = 0  # where the next turn over the nodes starts
        self.mid_line: int | None = None  # the node whose last event ended inside a line

    @property
    def attempt(self) -> int:
        return self.position.attempt

    async def refresh(self) -> Target:
        return await asyncio.to_thread(locate, self.rt, self.user, self.run_id, None)

    async def paths_of(self, attempt: int) -> tuple[Path | None, ...]:
        if attempt not in self.paths:
            found = await asyncio.to_thread(locate, self.rt, self.user, self.run_id, attempt)
            self.paths[attempt] = found.paths
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
        return StreamEvent(SSE_END, payload, self.position.format())

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
                attempt = min(max(self.attempt, 1), target.attempts)
                self.position = LogPosition(attempt, self.position.offsets)
                over = attempt < target.attempts or target.status.is_terminal
                event = await self._next_chunk(over)
                if event is not None:
                    yield event
                    continue
                if over and attempt < target.attempts:
                    nodes = len(await self.paths_of(attempt + 1))
                    self.position = LogPosition(attempt + 1).for_nodes(nodes)
                    self.next_node, self.mid_line = 0, None
                    payload = StreamAttempt(attempt=attempt + 1)
                    yield StreamEvent(SSE_ATTEMPT, payload, self.position.format())
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

    def _turn(self, nodes: int) -> list[int]:
        """The nodes to look at, in order: the one alone, else a line cut by the last read
        first, then every node from where the last turn stopped."""
        if self.node is not None:
            return [self.node] if self.node < nodes else []
        order = [(self.next_node + i) % nodes for i in range(nodes)]
        if self.mid_line is not None and self.mid_line < nodes:
            order.remove(self.mid_line)
            order.insert(0, self.mid_line)
        return order

    async def _next_chunk(self, over: bool) -> StreamEvent | None:
        paths = await self.paths_of(self.attempt)
        self.position = self.position.for_nodes(len(paths))
        for node in self._turn(len(paths)):
            event = await self._read_node(paths, node, over)
            if event is not None:
                return event
        return None

    async def _read_node(
        self, paths: tuple[Path | None, ...], node: int, over: bool
    ) -> StreamEvent | None:
        path, offset = paths[node], self.position.offset(node)
        try:
            size = os.stat(path).st_size if path is not None else 0
        except FileNotFoundError:
            size = 0
        if size <= offset:
            return None
        text, end = await asyncio.to_thread(
            read_from, path, offset, complete=over, limit=self.max_event_bytes
        )
        if end == offset:
            return None
        self.position = self.position.moved(node, end)
        self.next_node = (node + 1) % len(paths)
        self.mid_line = None if text.endswith("\n") else node
        if self.node is None and len(paths) > 1:
            if over and end >= size and self.mid_line is not None:
                text += "\n"  # its last line ends here: the next node's lines start their own
                self.mid_line = None
            at_start = await asyncio.to_thread(starts_line, path, offset)
            text = logcursor.label(text, node, at_line_start=at_start)
        payload = StreamLog(attempt=self.attempt, text=text, node=node)
        return StreamEvent(SSE_LOG, payload, self.position.format())
