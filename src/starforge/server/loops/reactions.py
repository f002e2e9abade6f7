"""The reactions loop: carries out what status changes set off (``services/runs/reactions``), in the
leading process only, beside the scheduler and the reconciler.

It polls every :data:`TICK_S` (an owed reaction waits at most that long) and runs the handlers in a
worker thread, so hashing an output dataset never holds up the event loop.
"""

from __future__ import annotations

from starforge.server.loops import ticks
from starforge.server.runtime import Runtime
from starforge.server.services.runs import reactions

TICK_S = 0.5


async def reactions_loop(rt: Runtime) -> None:
    await ticks.every(TICK_S, rt, "reactions pass", reactions.run_due)
