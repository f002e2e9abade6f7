"""An attempt's log read over the JSON log endpoint, and its last lines: what ``sf job logs``
(:mod:`starforge.cli.logs`) and its stdlib fast path (:mod:`starforge.cli.fastpath`) share, so
both print the same bytes. Standard library only: the source is any client whose ``logs()``
answers a chunk with ``data``, ``offset`` and ``final`` (the typed
:class:`starforge.client.http.Client`, or the fast path's plain one).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is an import the fast path does without (its Protocol too)
if TYPE_CHECKING:
    from typing import Protocol

    class Chunk(Protocol):
        @property
        def data(self) -> str: ...
        @property
        def offset(self) -> int: ...
        @property
        def final(self) -> bool: ...

    class LogSource(Protocol):
        def logs(
            self, run_id: str, *, attempt: int | None, offset: int, tail: int | None
        ) -> Chunk: ...


def read_attempt(
    source: LogSource, run_id: str, attempt: int, tail: int | None = None
) -> tuple[str, int, bool]:
    """An attempt's log from its start, or (``tail``) from its last ``tail`` lines on: the
    server finds them reading back from the end, so a long log costs only its tail. Returns
    (text, the offset after it, whether the run ended and all of its log was sent)."""
    data, offset = [], 0
    first: int | None = tail
    while True:
        chunk = source.logs(run_id, attempt=attempt, offset=offset, tail=first)
        first = None
        data.append(chunk.data)
        if chunk.offset == offset or chunk.final:
            return "".join(data), chunk.offset, chunk.final
        offset = chunk.offset


def last_lines(text: str, lines: int) -> str:
    """The last ``lines`` lines of ``text`` (a tail read may start a line early)."""
    return "".join(text.splitlines(keepends=True)[-lines:]) if lines > 0 else ""
