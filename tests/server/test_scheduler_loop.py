"""The scheduler loop gathers a burst of arrivals into one pass, and never holds back a wake-up
that may have freed GPUs."""

from __future__ import annotations

import asyncio
import time

import pytest

from starforge.contract.states import JobStatus
from starforge.server.db.models import Attempt, Run, utcnow
from starforge.server.loops import scheduler as loop
from starforge.server.runtime import Runtime
from starforge.server.services.runs import actions, jobs
from starforge.server.services.scheduling import queue

from .factories import FakeExecutor, member, report, run_row, schedule, submit


def test_a_submission_wakes_the_scheduler_as_an_arrival_and_a_stop_as_urgent(
    rt: Runtime, executor: FakeExecutor
) -> None:
    urgent = rt.urgent_wakeups
    run_id = submit(rt).run_id
    assert rt.urgent_wakeups == urgent and rt.wakeups > 0
    schedule(rt)
    actions.stop(rt, member("alice"), run_id)
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


# ---- arrivals to a full cluster ---------------------------------------------------------------


def full_cluster(rt: Runtime) -> list[str]:
    """Every GPU of the inventory held by a started run; the queue explained by a pass."""
    held = [submit(rt, profiles=[p]).run_id for p in ("h200:16", "h100:8")]
    assert sorted(schedule(rt)) == sorted(held)
    return held


def edit(rt: Runtime, run_id: str, **values: object) -> None:
    """Change a run's row behind the scheduler's back (no wake-up)."""
    with rt.transaction() as session:
        run = session.get(Run, run_id)
        assert run is not None
        for key, value in values.items():
            setattr(run, key, value)


def test_arrivals_to_a_full_cluster_are_explained_by_a_later_pass_not_one_each(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    full_cluster(rt)
    explained = rt.queue_pass
    arrivals = [submit(rt, profiles=["h200:8"]).run_id for _ in range(3)]
    assert loop.run_pass(rt, arrivals_may_wait=True) == 0
    assert rt.queue_pass is explained  # no replan of the queue per arrival
    assert jobs.get(rt, member("alice"), arrivals[-1]).reason == "waiting for the scheduler"
    monkeypatch.setattr(queue, "EXPLAIN_S", 0.0)  # the latest pass is now old enough
    loop.run_pass(rt, arrivals_may_wait=True)
    assert rt.queue_pass is not explained and set(arrivals) <= set(rt.queue_pass.decisions)
    view = jobs.get(rt, member("alice"), arrivals[-1])
    assert view.pending is not None and view.reason != "waiting for the scheduler"


def test_an_arrival_never_waits_while_a_gpu_is_free_even_one_freed_without_a_wake_up(
    rt: Runtime,
) -> None:
    holder, _ = full_cluster(rt)
    waiting = submit(rt, profiles=["h200:8"]).run_id
    assert queue.arrivals_can_wait(rt)
    with rt.transaction() as session:  # another process ended the holder's attempt
        run = session.get(Run, holder)
        assert run is not None and run.current is not None
        session.get(Attempt, run.current.id).ended_at = utcnow()  # type: ignore[union-attr]
    assert not queue.arrivals_can_wait(rt)
    assert loop.run_pass(rt, arrivals_may_wait=True) == 1
    assert run_row(rt, waiting).status == JobStatus.STARTING


def test_an_arrival_that_needs_no_gpu_or_may_preempt_never_waits(rt: Runtime) -> None:
    held = full_cluster(rt)
    for run_id in held:
        report(rt, run_id, "starting")
        report(rt, run_id, "running")
    schedule(rt)  # the reports woke the scheduler: the pass that follows
    step = submit(rt, profiles=["h200:8"]).run_id
    assert queue.arrivals_can_wait(rt)
    edit(rt, step, gpus=0)  # an export step's run needs no GPU: it starts on a full cluster
    assert not queue.arrivals_can_wait(rt)
    edit(rt, step, gpus=8, priority=10)  # it outranks the running runs: it may preempt one
    assert not queue.arrivals_can_wait(rt)
    rt.settings.preemption = False
    assert queue.arrivals_can_wait(rt)


def test_an_urgent_wake_up_after_arrivals_makes_the_pass_run(rt: Runtime) -> None:
    _, holder = full_cluster(rt)  # h100:8, one node
    waiting = submit(rt, profiles=["h100:8"]).run_id
    assert queue.arrivals_can_wait(rt)
    report(rt, holder, "starting")
    report(rt, holder, "running")
    report(rt, holder, "exited", exit_code=0)  # a run ended: urgent, and its GPUs are free
    assert not queue.arrivals_can_wait(rt)
    assert loop.run_pass(rt, arrivals_may_wait=True) == 1
    assert run_row(rt, waiting).status == JobStatus.STARTING
