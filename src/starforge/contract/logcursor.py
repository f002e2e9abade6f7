"""Where a reader of a multi-node run's log stands, and how a node's lines are labelled.

Every node of an attempt writes its own file (:meth:`starforge.contract.layout.RunLayout.log`),
so a position in the attempt's log is one byte offset per node. On the wire (the log stream's
event ids, ``Last-Event-ID``, ``?from=``) it is ``<attempt>:<offset of node 0>[,<offset of node
1>…]``: a single-node attempt's position is exactly the ``<attempt>:<offset>`` every earlier
client and server spoke. It is read leniently: a node the position does not name (an id from
before multi-node logs, or the ``<attempt>:0`` that starts an attempt) is at its start, and
offsets past the attempt's last node are ignored.

A line from node r > 0 is shown as ``[node r] <line>``; node 0's lines are not labelled, so a
single-node run's log reads exactly as its file. A label goes only where a line starts: a chunk
that continues a line cut by an earlier read is not labelled again (:func:`label`).

Standard library only: ``sf job logs``'s fast path (:mod:`starforge.cli.fastpath`) labels too.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is an import the fast path does without
if TYPE_CHECKING:
    from collections.abc import Sequence

HINT = "a log position looks like ATTEMPT:OFFSET[,OFFSET…] (one offset per node), e.g. 1:2048"


class LogPosition:
    """An attempt and one byte offset per node (missing nodes are at 0). Immutable."""

    __slots__ = ("attempt", "offsets")

    def __init__(self, attempt: int, offsets: Sequence[int] = ()) -> None:
        self.attempt = attempt
        self.offsets: tuple[int, ...] = tuple(offsets)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LogPosition):
            return NotImplemented
        return (self.attempt, self.offsets) == (other.attempt, other.offsets)

    def __hash__(self) -> int:
        return hash((self.attempt, self.offsets))

    def __repr__(self) -> str:
        return f"LogPosition({self.format()!r})"

    def offset(self, node: int) -> int:
        return self.offsets[node] if node < len(self.offsets) else 0

    def for_nodes(self, nodes: int) -> LogPosition:
        """The same position spelled for an attempt of ``nodes`` nodes (padded or cut)."""
        return LogPosition(self.attempt, [self.offset(r) for r in range(max(nodes, 1))])

    def moved(self, node: int, offset: int) -> LogPosition:
        """This position with ``node`` at ``offset``."""
        offsets = [self.offset(r) for r in range(max(len(self.offsets), node + 1))]
        offsets[node] = offset
        return LogPosition(self.attempt, offsets)

    def format(self) -> str:
        return f"{self.attempt}:{','.join(str(o) for o in self.offsets or (0,))}"


def parse(text: str) -> LogPosition:
    """``"3:1024"`` -> attempt 3, node 0 at 1024; ``"3:1024,77"`` -> node 1 at 77 too.
    Raises ValueError (with :data:`HINT` worth showing) for anything else."""
    attempt, sep, rest = text.strip().partition(":")
    try:
        number = int(attempt)
        offsets = [int(part) for part in rest.split(",")]
    except ValueError:
        number, offsets = -1, []
    if not sep or number < 1 or not offsets or min(offsets) < 0:
        raise ValueError(f"invalid log position {text!r}")
    return LogPosition(number, offsets)


def tag(node: int) -> str:
    """The label of a line of ``node`` (none for node 0)."""
    return f"[node {node}] " if node > 0 else ""


def label(text: str, node: int, *, at_line_start: bool = True) -> str:
    """``text`` (lines of one node's log) with each line that starts in it labelled with its
    node; ``at_line_start``: whether the text's first character starts a line."""
    prefix = tag(node)
    if not prefix or not text:
        return text
    body = text.replace("\n", "\n" + prefix)
    if body.endswith("\n" + prefix):
        body = body[: -len(prefix)]  # the final newline ends a line; it starts none
    return prefix + body if at_line_start else body


def merge(texts: Sequence[str]) -> str:
    """Several nodes' texts as one log, node by node in rank order, each labelled; a node's
    text that ends without a newline gets one, so the next node's lines start their own."""
    parts = []
    for node, text in enumerate(texts):
        if text and len(texts) > 1 and not text.endswith("\n"):
            text += "\n"
        parts.append(label(text, node))
    return "".join(parts)
