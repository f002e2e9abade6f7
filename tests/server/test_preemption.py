"""Checkpoint-first preemption: the pure decision as a table, then the pass on a real database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from starforge.contract.profiles import Pool
from starforge.contract.states import JobStatus
from starforge.server.db.models import Run
from starforge.server.loops.scheduler import run_pass
from starforge.server.runtime import Runtime
from starforge.server.services.scheduling import preemption
from starforge.server.services.scheduling.preemption import Holder, Preempt, Waiting, choose
from starforge.server.settings import NodeDef

from .factories import FakeExecutor, report, run_row, running_run, submit
from .lifecycle_factories import checkpoint

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
NODES = [NodeDef(name="n1", series="h200", gpus=8), NodeDef(name="n2", series="h200", gpus=8)]
ALL8 = tuple(range(8))


def pool(gpus: int, nodes: int = 1) -> tuple[Pool, ...]:
    return (
        Pool(
            name="trainer",
            roles=["trainer"],
            profile="h200",
            series="h200",
            nodes=nodes,
            gpus_per_node=gpus,
        ),
    )


def holder(run_id: str, priority: int, node: str = "n1", gpus: tuple[int, ...] = ALL8, *,
           resumable: bool = True, status: JobStatus = JobStatus.RUNNING, minutes: int = 0,
           preempted_min_ago: float | None = None) -> Holder:  # fmt: skip
    return Holder(
        run_id, priority, status, ((node, gpus),), resumable,
        started_at=NOW - timedelta(minutes=60 - minutes),
        preempted_at=None if preempted_min_ago is None
        else NOW - timedelta(minutes=preempted_min_ago),
    )  # fmt: skip


HIGH8 = Waiting("hi", 10, pool(8))
CASES = [
    # (what, waiting, holders, preempted victims)
    ("a resumable lower-priority run gives its node", [HIGH8],
     [holder("lo", 0), holder("mid", 5, "n2", resumable=False)], ["lo"]),
    ("a run that cannot resume is never preempted", [HIGH8],
     [holder("lo", 0, resumable=False), holder("lo2", 0, "n2", resumable=False)], []),
    ("equal priority is not lower", [HIGH8], [holder("a", 10), holder("b", 10, "n2")], []),
    ("the lowest priority goes first", [HIGH8], [holder("p3", 3), holder("p1", 1, "n2")],
     ["p1"]),
    ("within a priority the youngest goes first", [HIGH8],
     [holder("old", 0, minutes=0), holder("young", 0, "n2", minutes=30)], ["young"]),
    ("only the victims it needs: one node's two half runs",
     [Waiting("hi", 10, pool(8))],
     [holder("a", 0, gpus=(0, 1, 2, 3)), holder("b", 0, gpus=(4, 5, 6, 7)),
      holder("c", 0, "n2", gpus=(0, 1, 2, 3), minutes=50), holder("d", 5, "n2", gpus=(4, 5, 6, 7))],
     ["a", "b"]),
    ("free GPUs are used before anyone is preempted", [Waiting("hi", 10, pool(4))],
     [holder("a", 0, gpus=(0, 1, 2, 3)), holder("b", 0, "n2")], []),
    ("a run pausing already releases its GPUs: no second victim", [HIGH8],
     [holder("a", 0, status=JobStatus.PAUSING), holder("b", 0, "n2")], []),
    ("not twice within the interval", [HIGH8],
     [holder("a", 0, preempted_min_ago=5), holder("b", 1, "n2", resumable=False)], []),
    ("again once the interval passed", [HIGH8],
     [holder("a", 0, preempted_min_ago=11), holder("b", 1, "n2", resumable=False)], ["a"]),
    ("a run too wide even with every victim preempts nobody", [Waiting("hi", 10, pool(8, 3))],
     [holder("a", 0), holder("b", 0, "n2")], []),
    ("two waiting runs take two different victims",
     [Waiting("h1", 10, pool(8)), Waiting("h2", 9, pool(8))],
     [holder("a", 0), holder("b", 0, "n2")], ["a", "b"]),
    ("a later waiting run does not take what an earlier one will",
     [Waiting("h1", 10, pool(8)), Waiting("h2", 9, pool(8))],
     [holder("a", 0), holder("b", 9, "n2")], ["a"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("waiting", "holders", "victims"), [pytest.param(*c[1:], id=c[0]) for c in CASES]
)
def test_preemption_takes_the_fewest_resumable_lower_priority_runs(
    waiting: list[Waiting], holders: list[Holder], victims: list[str]
) -> None:
    got = choose(waiting, holders, NODES, now=NOW, min_interval_s=600)
    assert sorted(p.victim for p in got) == sorted(victims)
    assert all(p.by_priority > next(h.priority for h in holders if h.run_id == p.victim)
               for p in got)  # fmt: skip


def test_each_victim_is_named_with_the_run_that_takes_its_place() -> None:
    got = choose(
        [Waiting("h1", 10, pool(8)), Waiting("h2", 9, pool(8))],
        [holder("a", 0), holder("b", 0, "n2")],
        NODES,
        now=NOW,
        min_interval_s=600,
    )
    assert {(p.victim, p.by, p.by_priority) for p in got} == {("a", "h1", 10), ("b", "h2", 9)}
    assert preemption.actor_of(Preempt("a", "h2", 9)) == "preempted by h2 (priority 9)"


# ---- the pass, on a real database ---------------------------------------------------------------


def set_priority(rt: Runtime, run_id: str, priority: int) -> None:
    with rt.transaction() as session:
        run = session.get(Run, run_id)
        assert run is not None
        run.priority = priority


def test_a_priority_run_takes_the_gpus_of_a_resumable_run_which_resumes_later(
    rt: Runtime, executor: FakeExecutor
) -> None:
    resumable = running_run(rt)  # h200:8 on one node
    stuck = running_run(rt)  # the other node; no checkpoint: it cannot resume
    checkpoint(rt, resumable, "step-12")
    urgent = submit(rt, user="bob").run_id
    set_priority(rt, urgent, 10)
    run_pass(rt)  # it waits for capacity; the pass preempts one run for it

    victim = run_row(rt, resumable)
    assert victim.status == JobStatus.PAUSING
    assert victim.events[-1].actor == f"preempted by {urgent} (priority 10)"
    assert victim.reason.startswith(f"preempted by {urgent} (priority 10): it needs the GPUs")
    assert run_row(rt, stuck).status == JobStatus.RUNNING  # never the one that cannot resume
    assert len(executor.stopped) == 1  # SIGTERM: the training checkpoints and exits
    run_pass(rt)
    assert run_row(rt, stuck).status == JobStatus.RUNNING  # its pausing frees enough: no second

    report(rt, resumable, "exited", exit_code=143)
    assert run_row(rt, resumable).status == JobStatus.PAUSED
    run_pass(rt)  # the urgent run starts on the freed node; the victim is requeued behind it
    assert run_row(rt, urgent).status == JobStatus.STARTING
    victim = run_row(rt, resumable)
    assert victim.status == JobStatus.QUEUED
    requeue = victim.events[-1]
    assert requeue.actor == "preemption"
    assert requeue.reason == (
        f"requeued after preemption by {urgent} (priority 10); it continues from step-12 (step 12)"
    )
    assert victim.attempts[0].end_reason == "preempted"

    report(rt, urgent, "starting")
    report(rt, urgent, "running")
    report(rt, urgent, "exited", exit_code=0)
    run_pass(rt)
    victim = run_row(rt, resumable)
    assert victim.status == JobStatus.STARTING and victim.current_attempt == 2
    assert victim.attempts[1].resumed_from is not None
    assert victim.attempts[1].resumed_from.endswith("checkpoints/step-12")


def test_a_run_preempted_recently_is_not_preempted_again(
    rt: Runtime, executor: FakeExecutor
) -> None:
    first = running_run(rt)
    other = running_run(rt)
    checkpoint(rt, first, "step-3")
    urgent = submit(rt, user="bob").run_id
    set_priority(rt, urgent, 10)
    run_pass(rt)
    report(rt, first, "exited", exit_code=143)
    run_pass(rt)  # urgent starts; first is requeued
    report(rt, urgent, "starting")
    report(rt, urgent, "running")
    report(rt, urgent, "exited", exit_code=0)
    run_pass(rt)
    report(rt, first, "starting", attempt=2)
    report(rt, first, "running", attempt=2)
    assert run_row(rt, first).status == JobStatus.RUNNING

    again = submit(rt, user="bob").run_id
    set_priority(rt, again, 10)
    run_pass(rt)
    assert run_row(rt, first).status == JobStatus.RUNNING  # within preempt_min_interval_s
    assert run_row(rt, other).status == JobStatus.RUNNING
    assert run_row(rt, again).status == JobStatus.QUEUED
