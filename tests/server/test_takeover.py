"""A new leader starts what a dead one placed but never started: once, as the placed attempt."""

from __future__ import annotations

import json

from starforge.contract.layout import RunLayout
from starforge.contract.states import NodeState
from starforge.server.loops import takeover
from starforge.server.runtime import Runtime
from starforge.server.services.scheduling import dispatch

from .factories import FakeExecutor, run_row, submit


def placed_not_started(rt: Runtime, count: int) -> list[str]:
    """Runs whose placement was committed by a leader that died before starting them."""
    run_ids = [submit(rt).run_id for _ in range(count)]
    orders = dispatch.schedule_pass(rt)  # committed; start_attempt never runs
    assert sorted(o.run_id for o in orders) == sorted(run_ids)
    return run_ids


def test_a_placed_run_whose_leader_died_is_started_once_as_its_first_attempt(
    rt: Runtime, executor: FakeExecutor
) -> None:
    (run_id,) = placed_not_started(rt, 1)
    rt.url = "http://127.0.0.1:7777"  # the new leader's address

    assert takeover.finish_interrupted_starts(rt, grace_s=0) == 1
    assert takeover.finish_interrupted_starts(rt, grace_s=0) == 0  # nothing left to start

    assert len(executor.started) == 1
    run = run_row(rt, run_id)
    assert run.current_attempt == 1 and len(run.attempts) == 1
    node = run.attempts[0].node_records()[0]
    assert node.state is NodeState.STARTED and node.ref == executor.started[0][0]
    binding = json.loads(executor.started[0][1].read_text())
    assert binding["endpoint"] == "http://127.0.0.1:7777"  # reports reach a live process


def test_a_runner_the_dead_leader_launched_is_left_to_be_adopted_not_started_again(
    rt: Runtime, executor: FakeExecutor
) -> None:
    launched, never = placed_not_started(rt, 2)
    run = run_row(rt, launched)
    record = RunLayout(dispatch.run_dir_of(rt, run)).runner_record(1, 0)
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"pid": 4242, "pgid": 4242, "host": "h", "at": 0}))

    assert takeover.finish_interrupted_starts(rt, grace_s=0) == 1

    assert [b.parent.parent.name for _, b, _ in executor.started] == [never]
    assert run_row(rt, launched).attempts[0].node_records()[0].state is NodeState.PENDING


def test_with_nothing_half_started_a_new_leader_does_not_wait(rt: Runtime) -> None:
    submit(rt)  # queued, not placed
    assert takeover.interrupted(rt) == []
    assert takeover.finish_interrupted_starts(rt, grace_s=3600) == 0  # returns at once
