"""An attempt's log read over the JSON log endpoint, every node's or one node's, and its last
lines: what ``sf job logs`` (:mod:`starforge.cli.logs`) and its stdlib fast path
(:mod:`starforge.cli.fastpath`) share, so both print the same bytes. Standard library only: the
source is any client whose ``logs()`` answers a chunk with ``data``, ``offset``, ``final`` and
``nodes`` (the typed :class:`starforge.client.http.Client`, or the fast path's plain one).

Each node of an attempt has its own log; the first answer (node 0's) says how many there are,
and the others are read after it. Shown together they are node by node, node r > 0's lines
labelled ``[node r]`` (:func:`starforge.contract.logcursor.merge`); a single-node attempt's text
is its file's, as it always was. With ``tail`` each node contributes its own last lines.
"""

from __future__ import annotations

from starforge.contract.logcursor import merge

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
        @property
        def nodes(self) -> int: ...

    class LogSource(Protocol):
        def logs(
            self,
            run_id: str,
            *,
            attempt: int | None,
            offset: int,
            tail: int | None,
            node: int | None = None,
        ) -> Chunk: ...


def read_attempt(
    source: LogSource,
    run_id: str,
    attempt: int,
    tail: int | None = None,
    node: int | None = None,
) -> tuple[str, int, bool, int]:
    """One node's log of an attempt (node 0's unless ``node``) from its start, or (``tail``)
    from its last ``tail`` lines on: the server finds them reading back from the end, so a long
    log costs only its tail. Returns (text, the offset after it, whether the run ended and all
    of this log was sent, how many nodes the attempt has)."""
    data, offset = [], 0
    first: int | None = tail
    while True:
        chunk = source.logs(run_id, attempt=attempt, offset=offset, tail=first, node=node)
        first = None
        data.append(chunk.data)
        if chunk.offset == offset or chunk.final:
            return "".join(data), chunk.offset, chunk.final, chunk.nodes
        offset = chunk.offset


def node_texts(source: LogSource, run_id: str, attempt: int, tail: int | None = None) -> list[str]:
    """Every node's log of an attempt (with ``tail``: each one's last ``tail`` lines), by rank."""
    text, _, _, nodes = read_attempt(source, run_id, attempt, tail=tail)
    texts = [text]
    for node in range(1, nodes):
        texts.append(read_attempt(source, run_id, attempt, tail=tail, node=node)[0])
    return [last_lines(t, tail) for t in texts] if tail else texts


def attempt_text(
    source: LogSource,
    run_id: str,
    attempt: int,
    tail: int | None = None,
    node: int | None = None,
) -> str:
    """What ``sf job logs`` prints of an attempt: ``node``'s log alone (unlabelled), else every
    node's, labelled; all of it, or (``tail`` >= 1) the last ``tail`` lines of each."""
    if node is None:
        return merge(node_texts(source, run_id, attempt, tail=tail))
    text = read_attempt(source, run_id, attempt, tail=tail, node=node)[0]
    return last_lines(text, tail) if tail else text


def last_lines(text: str, lines: int) -> str:
    """The last ``lines`` lines of ``text`` (a tail read may start a line early)."""
    return "".join(text.splitlines(keepends=True)[-lines:]) if lines > 0 else ""
