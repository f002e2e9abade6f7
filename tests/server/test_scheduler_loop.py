"""The scheduler loop gathers a burst of arrivals into one pass, and never holds back a wake-up
that may have freed GPUs."""

from __future__ import annotations

import asyncio
import time

from starforge.server.loops import scheduler as loop
from starforge.server.runtime import Runtime
from starforge.server.services import actions

from .factories import FakeExecutor, schedule, submit


def test_a_submission_wakes_the_scheduler_as_an_arrival_and_a_stop_as_urgent(
    rt: Runtime, executor: FakeExecutor
) -> None:
    urgent = rt.urgent_wakeups
    run_id = submit(rt).run_id
    assert rt.urgent_wakeups == urgent and rt.wakeups > 0
    schedule(rt)
    actions.stop(rt, "alice", run_id)
    assert rt.urgent_wakeups == urgent + 1


def test_arrivals_wait_for_the_gathering_but_an_urgent_wake_up_ends_it_at_once(
    rt: Runtime,
) -> None:
    async def scenario() -> tuple[bool, bool]:
        wake = asyncio.Event()
        rt.bind_loop(asyncio.get_running_loop(), wake)
        try:
            far = time.monotonic() + 3600  # a gathering that would outlast the test
            task = asyncio.create_task(loop.gather(rt, wake, far, rt.urgent_wakeups))
            for _ in range(3):
                rt.wake_scheduler(arrival=True)
                for _ in range(5):  # let the gathering see the arrival and wait again
                    await asyncio.sleep(0)
            held = not task.done()
            rt.wake_scheduler()
            await asyncio.wait_for(task, timeout=60)
            return held, task.done()
        finally:
            rt.unbind_loop()

    held, ended = asyncio.run(scenario())
    assert held, "arrivals alone ended the gathering"
    assert ended


def test_the_gathering_is_a_few_times_the_latest_pass_and_never_long() -> None:
    assert loop.gather_s(0.002) == loop.GATHER_FACTOR * 0.002
    assert loop.gather_s(10.0) == loop.MAX_GATHER_S
