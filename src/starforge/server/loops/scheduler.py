"""The scheduler loop: a pass on every wake-up (submit, stop, run end) and at least once a second.

The pass itself (database work, binding files, process starts) runs in a worker thread so the
event loop keeps serving requests; the runtime's loop lock keeps it apart from the reconciler.
The wake event is cleared *before* a pass, so a wake-up that arrives during a pass causes another.
Each pass is also what views of queued runs show (their place and why they wait): the pass keeps
its decisions on the runtime (``services/queue``), and reads never plan on their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from starforge.server.runtime import Runtime
from starforge.server.services import dispatch, preemption

log = logging.getLogger(__name__)
TICK_S = 1.0


def run_pass(rt: Runtime) -> int:
    """One scheduler pass: place what fits, then start it. Returns the number of starts."""
    with rt.loop_lock:
        orders = dispatch.schedule_pass(rt)
        for order in orders:
            dispatch.start_attempt(rt, order)
        preemption.preempt_pass(rt)  # runs that still wait may take lower-priority runs' GPUs
    return len(orders)


async def scheduler_loop(rt: Runtime, wake: asyncio.Event) -> None:
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), timeout=TICK_S)
        wake.clear()
        try:
            await asyncio.to_thread(run_pass, rt)
        except asyncio.CancelledError:
            raise
        except Exception:  # a bad pass must not end scheduling for good
            log.exception("scheduler pass failed")
