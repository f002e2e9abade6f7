"""The scheduler loop: a pass on every wake-up (submit, stop, run end) and at least once a second.

The pass itself (database work, binding files, process starts) runs in a worker thread so the
event loop keeps serving requests; the runtime's loop lock keeps it apart from the reconciler.
The wake event is cleared *before* a pass, so a wake-up that arrives during a pass causes another.
Each pass is also what views of queued runs show (their place and why they wait): the pass keeps
its decisions on the runtime (``services/scheduling/queue``), and reads never plan on their own.

A burst of submissions is gathered: when only arrivals woke it, the next pass waits until
:data:`GATHER_FACTOR` times the latest pass's duration has gone by (at most :data:`MAX_GATHER_S`),
so however fast runs arrive, planning a long queue takes at most about a quarter of the server's
time and admission keeps the rest. On an idle server a pass takes milliseconds, and so does the
wait. Any other wake-up (a run ended, a stop, a quota changed) ends the wait at once: freed GPUs
are never left idle for the sake of a burst.

On a full cluster a burst is not planned at all: while no GPU is free and no queued run could
preempt, a pass that only arrivals asked for is left until the latest pass is ``EXPLAIN_S`` old
(``queue.arrivals_can_wait``), so submitting to a long queue costs a few small reads, not a
replan of the whole queue each time. Nothing that could start waits for it: the check reads
the database's free GPUs, whatever woke the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from starforge.server.loops import ticks
from starforge.server.runtime import Runtime
from starforge.server.services.scheduling import dispatch, preemption, queue

TICK_S = 1.0
GATHER_FACTOR = 3.0
MAX_GATHER_S = 0.25


def run_pass(rt: Runtime, *, arrivals_may_wait: bool = False) -> int:
    """One scheduler pass: place what fits, then start it. Returns the number of starts.

    ``arrivals_may_wait`` (the loop's passes): skip the pass while only arrivals that can
    neither start nor preempt woke it (:func:`queue.arrivals_can_wait`)."""
    with rt.loop_lock:
        if arrivals_may_wait and queue.arrivals_can_wait(rt):
            return 0
        orders = dispatch.schedule_pass(rt)
        dispatch.start_attempts(rt, orders)
        preemption.preempt_pass(rt)  # runs that still wait may take lower-priority runs' GPUs
    return len(orders)


def gather_s(last_pass_s: float) -> float:
    """How long arrivals wait after a pass that took ``last_pass_s``."""
    return min(MAX_GATHER_S, GATHER_FACTOR * last_pass_s)


async def gather(rt: Runtime, wake: asyncio.Event, until: float, urgent_seen: int) -> None:
    """Wait until ``until`` (monotonic) while only arrivals have woken the scheduler since the
    latest pass began (``urgent_seen`` is ``rt.urgent_wakeups`` then)."""
    while rt.urgent_wakeups == urgent_seen and (left := until - time.monotonic()) > 0:
        wake.clear()  # an arrival sets it again; only an urgent wake-up ends the wait early
        if rt.urgent_wakeups != urgent_seen:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), timeout=left)


def loop_pass(rt: Runtime) -> int:
    """The loop's pass: arrivals that can neither start nor preempt may wait (:func:`run_pass`)."""
    return run_pass(rt, arrivals_may_wait=True)


async def scheduler_loop(rt: Runtime, wake: asyncio.Event) -> None:
    until, urgent_seen = 0.0, rt.urgent_wakeups
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), timeout=TICK_S)
        await gather(rt, wake, until, urgent_seen)
        wake.clear()
        urgent_seen, began = rt.urgent_wakeups, time.monotonic()
        await ticks.one_pass(rt, "scheduler pass", loop_pass)
        until = time.monotonic() + gather_s(time.monotonic() - began)
