"""The reconciler loop: once a second, finalise attempts whose runners went away unreported.

Like the scheduler it works in a worker thread under the runtime's loop lock, so it never sees an
attempt whose nodes are being started.
"""

from __future__ import annotations

import asyncio
import logging

from starforge.server.runtime import Runtime
from starforge.server.services import dispatch

log = logging.getLogger(__name__)
TICK_S = 1.0


def run_tick(rt: Runtime) -> None:
    with rt.loop_lock:
        dispatch.reconcile(rt)


async def reconciler_loop(rt: Runtime) -> None:
    while True:
        try:
            await asyncio.to_thread(run_tick, rt)
        except asyncio.CancelledError:
            raise
        except Exception:  # keep reconciling even if one tick hit a bad row
            log.exception("reconciler tick failed")
        await asyncio.sleep(TICK_S)
