"""The leadership loop: the leader's loops run while it leads and never stay ended."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from starforge.server.db.engine import make_engine
from starforge.server.loops import leader


def test_a_loop_that_ends_while_its_process_leads_is_started_again(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}")  # SQLite: this process always leads
    starts: list[float] = []
    changes: list[bool] = []

    async def crashing_loop() -> None:
        raise RuntimeError("a bug in a loop")

    def start_loops() -> list[asyncio.Task[None]]:
        starts.append(time.monotonic())
        return [asyncio.create_task(crashing_loop())]

    async def scenario() -> None:
        election = leader.Election(engine)
        task = asyncio.create_task(leader.lead(election, start_loops, changes.append))
        deadline = time.monotonic() + 30
        while len(starts) < 2:
            assert time.monotonic() < deadline, "the loops were not started again"
            await asyncio.sleep(0.05)
        await leader.stop_tasks([task])

    asyncio.run(scenario())
    engine.dispose()
    assert len(starts) >= 2
    assert changes == [True, False]  # led once, and said so when the app stopped
