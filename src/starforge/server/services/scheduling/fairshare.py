"""The order a scheduler pass considers queued runs in: priority, then fair share, then age.

Pure functions, no I/O. :func:`order_queue` is plain priority-then-age order (what one user
sees of their own runs). :func:`fair_order` is the pass's order: within a priority, runs queued
before the fair-share patience ran out go first (oldest first), then the next run comes from the
user holding the fewest GPUs, each user's runs oldest first (:mod:`.scheduler` says why).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from operator import attrgetter
from typing import Protocol, TypeVar


class Queued(Protocol):
    priority: int
    created_at: datetime
    id: str


class Fair(Queued, Protocol):
    user: str
    key: tuple[int, datetime, str]  # :func:`queue_key`


Q = TypeVar("Q", bound=Queued)
F = TypeVar("F", bound=Fair)
_KEY = attrgetter("key")


def queue_key(priority: int, created_at: datetime, run_id: str) -> tuple[int, datetime, str]:
    """Sort key of the queue: higher priority first, then older first, then by id."""
    return (-priority, created_at, run_id)


def order_queue(runs: Iterable[Q]) -> list[Q]:
    return sorted(runs, key=lambda r: queue_key(r.priority, r.created_at, r.id))


def fair_order(
    queue: Iterable[F],
    held: Callable[[str], int],
    overdue_before: datetime | None,
    settled: Callable[[], bool] = lambda: False,
) -> Iterable[F]:
    """Priority first; within a priority the runs queued since before ``overdue_before`` (oldest
    first), then the user holding the fewest GPUs (``held(user)``) next, each user's runs oldest
    first.

    A generator: the pass decides each run before the next is chosen, so what a run takes
    counts against its user at once. Once ``settled()`` (nothing left can start, so no user's
    GPUs change), the rest of a priority is what the heap would give, found by sorting: the
    users holding the fewest GPUs first, their runs merged by age.
    """
    levels: dict[int, dict[str, deque[F]]] = {}
    overdue: dict[int, list[F]] = {}
    for run in sorted(queue, key=_KEY):
        if overdue_before is not None and run.created_at < overdue_before:
            overdue.setdefault(run.priority, []).append(run)
        else:
            levels.setdefault(run.priority, {}).setdefault(run.user, deque()).append(run)
    for priority in sorted(levels.keys() | overdue.keys(), reverse=True):
        yield from overdue.get(priority, ())
        users = levels.get(priority, {})
        if not users:
            continue
        if len(users) == 1:
            yield from next(iter(users.values()))
            continue
        heap = [(held(u), q[0].key, u) for u, q in users.items()]
        heapq.heapify(heap)
        while heap:
            if settled():
                yield from _by_holdings(heap, users)
                break
            user = heap[0][2]
            runs = users[user]
            yield runs.popleft()
            if runs:
                heapq.heapreplace(heap, (held(user), runs[0].key, user))
            else:
                heapq.heappop(heap)


def _by_holdings(
    heap: list[tuple[int, tuple[int, datetime, str], str]], users: Mapping[str, deque[F]]
) -> Iterable[F]:
    """The runs left in ``heap``'s users' queues in the order the heap would pop them while no
    user's GPUs change: by GPUs held, then age."""
    groups: dict[int, list[F]] = {}
    for held, _, user in heap:
        groups.setdefault(held, []).extend(users[user])
    for held in sorted(groups):
        yield from sorted(groups[held], key=_KEY)
