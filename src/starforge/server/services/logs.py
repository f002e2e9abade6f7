"""Reading a run's logs: byte ranges of an attempt's node-0 log file, with long-polling.

Logs are plain files written by the runners, so reading needs no lock and no database session
while waiting: the run's status is read in a short transaction, the file is read directly, and a
long-poll sleeps between short checks. A chunk ends at the last newline (a half-written line waits
for its end) unless the run is over; ``final`` is true only when the run is terminal and every
byte of its last attempt's log was returned.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from starforge.contract.api import LogChunk
from starforge.contract.errors import NotFound
from starforge.contract.states import JobStatus
from starforge.server.runtime import Runtime
from starforge.server.services import jobs

MAX_CHUNK = 1 << 20
MAX_WAIT_S = 30.0
FILE_POLL_S = 0.2
STATUS_POLL_S = 1.0


@dataclass(frozen=True)
class Target:
    run_id: str
    status: JobStatus
    attempt: int  # 0 while the run has no attempt yet
    attempts: int
    path: Path | None

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
        return Target(run.id, JobStatus(run.status), number, count, path)


def _cut(data: bytes, complete: bool) -> bytes:
    """Trim to whole lines, or to whole UTF-8 characters when one line fills the chunk."""
    if complete:
        return data
    newline = data.rfind(b"\n")
    if newline >= 0:
        return data[: newline + 1]
    if len(data) < MAX_CHUNK:
        return b""  # a partial line: wait until it ends
    return data[: _utf8_boundary(data)] or data


def _utf8_boundary(data: bytes) -> int:
    """The length of ``data`` without a trailing incomplete UTF-8 character."""
    i = len(data) - 1
    while i > 0 and len(data) - i < 4 and (data[i] & 0xC0) == 0x80:
        i -= 1  # step back over continuation bytes (10xxxxxx) to the lead byte
    lead = data[i]
    need = 1 if lead < 0xC0 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
    return i if len(data) - i < need else len(data)


def read_range(target: Target, offset: int) -> LogChunk:
    size = target.path.stat().st_size if target.path and target.path.exists() else 0
    start = min(max(offset, 0), size)
    data = b""
    if target.path is not None and size > start:
        with open(target.path, "rb") as fh:
            fh.seek(start)
            data = fh.read(min(MAX_CHUNK, size - start))
    reaches_end = start + len(data) >= size
    data = _cut(data, complete=target.is_last_and_over and reaches_end)
    end = start + len(data)
    return LogChunk(
        attempt=target.attempt,
        offset=end,
        data=data.decode("utf-8", errors="replace"),
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
) -> LogChunk:
    """A chunk from ``offset``; with ``wait`` > 0, wait up to that long for new bytes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + min(max(wait, 0.0), MAX_WAIT_S)
    target = await asyncio.to_thread(locate, rt, user, ref, attempt)
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
