"""The shape every leader loop shares: run a pass in a worker thread, survive a failed one.

A pass (scheduling, reconciling, early stopping, webhook delivery, reactions) decides from the
database alone, so one that fails is logged and the next one simply runs; the loop ends only when
it is cancelled (leadership lost, shutdown). While the database is down every pass fails, and
that is said once (``db.outage``), not once per pass. The work runs in a worker thread so the
event loop keeps serving requests however long a pass takes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import NoReturn

from starforge.server.db import outage
from starforge.server.runtime import Runtime

log = logging.getLogger(__name__)


async def one_pass(rt: Runtime, what: str, work: Callable[[Runtime], object]) -> None:
    """Run ``work(rt)`` in a worker thread; a failure is logged as ``"<what> failed"``, never
    raised (only cancellation is)."""
    try:
        await asyncio.to_thread(work, rt)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a bad pass must not end its loop for good
        if not outage.of(rt.engine).failed(exc):  # an outage is said once, not per pass
            log.exception("%s failed", what)


async def every(
    tick_s: float, rt: Runtime, what: str, work: Callable[[Runtime], object]
) -> NoReturn:
    """Run :func:`one_pass` every ``tick_s`` seconds (after each pass ends) until cancelled."""
    while True:
        await one_pass(rt, what, work)
        await asyncio.sleep(tick_s)
