"""The reconciler loop: once a second, settle attempts whose runners did not say how they ended.

On start it publishes the control plane's beacon (URL, heartbeat interval) at the storage root,
so runners that outlived an earlier server find this one. Each tick runs
:func:`starforge.server.services.runs.reconcile.reconcile` in a worker thread under the runtime's
loop lock, so it never sees an attempt whose nodes are being started. A tick that fails is logged
and the next one runs: every tick decides from the database and the run dirs alone.
"""

from __future__ import annotations

import asyncio
import logging

from starforge.server.loops import ticks
from starforge.server.runtime import Runtime
from starforge.server.services.labops import maintenance
from starforge.server.services.runs import lifecycle, reconcile

log = logging.getLogger(__name__)
TICK_S = 1.0


def run_tick(rt: Runtime) -> None:
    with rt.loop_lock:
        reconcile.reconcile(rt)
    maintenance.pause_resumable(rt)  # a drain's runs that can resume now


async def reconciler_loop(rt: Runtime) -> None:
    try:
        await asyncio.to_thread(lifecycle.publish_beacon, rt)
    except OSError:
        log.exception("could not publish the control plane's beacon")
    await ticks.every(TICK_S, rt, "reconciler tick", run_tick)
