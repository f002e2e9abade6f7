"""Answers in the words of the client that reads them (docs/releases.md, "a value added to an
enum of an answer").

A release that adds a value to an enum of an answer records it in ``states.NEWER_VALUES`` with the
release that added it and the value older clients are told instead. The server says whose answer
it is writing (:func:`reader`, from the ``X-StarForge-Client`` header, around each request); every
answer field of such an enum is typed :data:`AnsweredEndReason`, which writes the older value to a
client before that release. Read back by any client, and written outside a request (the CLI's
``--json``, a webhook, a runner's record), the value is left as it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Annotated

from pydantic import PlainSerializer

from starforge.contract import versions
from starforge.contract.states import NEWER_VALUES, EndReason

_READER: ContextVar[str | None] = ContextVar("starforge_answer_reader", default=None)


@contextmanager
def reader(client: str | None) -> Iterator[None]:
    """Answers written inside are for ``client`` (its version; None: this release's)."""
    token = _READER.set(client)
    try:
        yield
    finally:
        _READER.reset(token)


def for_reader(value: EndReason, client: str | None) -> EndReason:
    """``value`` as a client of version ``client`` knows it."""
    newer = NEWER_VALUES.get(value)
    if newer is None or client is None or not versions.older(client, newer[0]):
        return value
    return newer[1]


def unknown_to(client: str) -> frozenset[str]:
    """The values a client of version ``client`` is never sent (it is told older ones)."""
    return frozenset(
        v.value for v, (since, _) in NEWER_VALUES.items() if versions.older(client, since)
    )


def _answer(value: EndReason) -> EndReason:
    return for_reader(value, _READER.get())


# An end reason in an answer: as its reader knows it.
AnsweredEndReason = Annotated[EndReason, PlainSerializer(_answer, return_type=EndReason)]
