"""The reactions loop: carries out what status changes set off (``services/runs/reactions``), in the
leading process only, beside the scheduler and the reconciler.

It polls every :data:`TICK_S` (an owed reaction waits at most that long) and runs the handlers in a
worker thread, so hashing an output dataset never holds up the event loop.
"""

from __future__ import annotations

import asyncio
import logging

from starforge.server.db import outage
from starforge.server.runtime import Runtime
from starforge.server.services.runs import reactions

log = logging.getLogger(__name__)
TICK_S = 0.5


async def reactions_loop(rt: Runtime) -> None:
    while True:
        try:
            await asyncio.to_thread(reactions.run_due, rt)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bad pass must not end the reactions for good
            if not outage.of(rt.engine).failed(exc):  # an outage is said once, not per pass
                log.exception("reactions pass failed")
        await asyncio.sleep(TICK_S)
