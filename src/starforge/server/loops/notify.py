"""The notify loop: delivers the webhook outbox (``services/labops/notify``), in the leading process
only.

It runs beside the scheduler and reconciler while this process leads, so one process sends each
payload; it polls every :data:`TICK_S` (a due payload waits at most that long) and does its HTTP
in a worker thread, so a slow receiver never holds up the event loop.
"""

from __future__ import annotations

import asyncio
import logging

from starforge.server.db import outage
from starforge.server.runtime import Runtime
from starforge.server.services.labops import notify

log = logging.getLogger(__name__)
TICK_S = 0.5


async def notify_loop(rt: Runtime) -> None:
    while True:
        try:
            await asyncio.to_thread(notify.deliver_due, rt)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bad pass must not end notifications for good
            if not outage.of(rt.engine).failed(exc):  # an outage is said once, not per pass
                log.exception("notify pass failed")
        await asyncio.sleep(TICK_S)
