"""The sweep loop (leader only): once a second, early-stop the sweep variants ASHA rules out.

Each tick runs :func:`starforge.server.services.workflows.sweeps.early_stop_pass` in a worker
thread; it decides from the database alone (metrics and statuses), so a killed tick is simply
redone.
"""

from __future__ import annotations

from starforge.server.loops import ticks
from starforge.server.runtime import Runtime
from starforge.server.services.workflows import sweeps

TICK_S = 1.0


async def sweep_loop(rt: Runtime) -> None:
    await ticks.every(TICK_S, rt, "sweep tick", sweeps.early_stop_pass)
