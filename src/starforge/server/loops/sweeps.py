"""The sweep loop (leader only): once a second, early-stop the sweep variants ASHA rules out.

Each tick runs :func:`starforge.server.services.workflows.sweeps.early_stop_pass` in a worker
thread; it decides from the database alone (metrics and statuses), so a killed tick is simply
redone.
"""

from __future__ import annotations

import asyncio
import logging

from starforge.server.db import outage
from starforge.server.runtime import Runtime
from starforge.server.services.workflows import sweeps

log = logging.getLogger(__name__)
TICK_S = 1.0


async def sweep_loop(rt: Runtime) -> None:
    while True:
        try:
            await asyncio.to_thread(sweeps.early_stop_pass, rt)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # one bad sweep must not end early stopping for good
            if not outage.of(rt.engine).failed(exc):  # an outage is said once, not per pass
                log.exception("sweep tick failed")
        await asyncio.sleep(TICK_S)
