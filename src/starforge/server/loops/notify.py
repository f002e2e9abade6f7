"""The notify loop: delivers the webhook outbox (``services/labops/notify``), in the leading process
only.

It runs beside the scheduler and reconciler while this process leads, so one process sends each
payload; it polls every :data:`TICK_S` (a due payload waits at most that long) and does its HTTP
in a worker thread, so a slow receiver never holds up the event loop.
"""

from __future__ import annotations

from starforge.server.loops import ticks
from starforge.server.runtime import Runtime
from starforge.server.services.labops import notify

TICK_S = 0.5


async def notify_loop(rt: Runtime) -> None:
    await ticks.every(TICK_S, rt, "notify pass", notify.deliver_due)
