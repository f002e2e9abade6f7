"""Scheduler passes (placement committed before starts) and the reconciler."""

from __future__ import annotations

import json
import shutil
import stat
import threading
from pathlib import Path

import pytest

from starforge.contract.env import Binding
from starforge.contract.layout import RunLayout
from starforge.contract.profiles import Pool
from starforge.server.db.models import Run
from starforge.server.executors.base import NodeLaunch
from starforge.server.runtime import Runtime
from starforge.server.services.access.users import token_digest
from starforge.server.services.runs import actions, jobs, reconcile
from starforge.server.services.scheduling import dispatch

from .factories import FakeExecutor, binding, member, report, run_row, running_run, schedule, submit


def write_exit_record(rt: Runtime, run_id: str, code: int, attempt: int = 1, rank: int = 0) -> None:
    run_dir = dispatch.run_dir_of(rt, run_row(rt, run_id))
    path = rt.storage.exit_record_path(run_dir, attempt, rank)
    path.write_text(json.dumps({"exit_code": code}))


def test_an_idle_cluster_starts_a_submitted_run_in_one_pass(
    rt: Runtime, executor: FakeExecutor
) -> None:
    run_id = submit(rt).run_id
    assert schedule(rt) == [run_id]
    run = run_row(rt, run_id)
    assert run.status == "starting" and run.current_attempt == 1
    attempt = run.attempts[0]
    assert attempt.allocation == [
        {
            "rank": 0,
            "pool": "all",
            "pool_rank": 0,
            "node": "h200-1",
            "gpus": [0, 1, 2, 3, 4, 5, 6, 7],
        }
    ]
    ref, binding_path, log_path = executor.started[0]
    assert attempt.executor_ref == ref and attempt.node_records()[0].ref == ref
    assert binding_path.name == "attempt-1.node-0.binding.json"
    assert log_path == Path(attempt.log_path)


def test_a_run_whose_files_cannot_be_written_stays_queued_and_the_pass_places_the_others(
    rt: Runtime,
) -> None:
    blocked, other = submit(rt).run_id, submit(rt).run_id
    run_dir = dispatch.run_dir_of(rt, run_row(rt, blocked))
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    run_dir.write_text("a file where the run's folder goes")
    assert schedule(rt) == [other]
    stuck, placed = run_row(rt, blocked), run_row(rt, other)
    assert (stuck.status, stuck.current_attempt, stuck.attempts) == ("queued", 0, [])
    assert [e.dst for e in stuck.events] == ["queued"]
    assert (placed.status, placed.current_attempt) == ("starting", 1)
    run_dir.unlink()  # the cause is gone: the next pass places it
    assert schedule(rt) == [blocked]


def test_the_binding_says_everything_the_runner_needs(rt: Runtime) -> None:
    run_id = submit(rt).run_id
    schedule(rt)
    data = binding(rt, run_id)
    b = Binding.model_validate(data)
    run = run_row(rt, run_id)
    run_dir = dispatch.run_dir_of(rt, run)
    assert (b.run_id, b.attempt, b.user, b.node_rank, b.nnodes) == (run_id, 1, "alice", 0, 1)
    assert b.run_dir == str(run_dir) and b.work_dir == str(run_dir / "work")
    assert b.log_path == str(run_dir / "logs" / "attempt-1.log")
    assert b.visible_devices == list(range(8)) and b.gpus_per_node == 8
    assert b.endpoint == "http://127.0.0.1:9999" and b.master_addr == "127.0.0.1"
    assert token_digest(b.run_token) == run.run_token_sha256
    assert b.extra_env == {"NCCL_X": "1"} and b.hf_offline
    path = rt.storage.binding_path(run_dir, 1, 0)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert (run_dir / "state" / "run.json").is_file()


def test_a_two_node_run_gets_one_runner_and_one_log_per_node(
    rt: Runtime, executor: FakeExecutor
) -> None:
    run_id = submit(rt, profiles=["h200:16"]).run_id
    schedule(rt)
    assert [p[2].name for p in executor.started] == ["attempt-1.log", "attempt-1.node-1.log"]
    first, second = binding(rt, run_id, rank=0), binding(rt, run_id, rank=1)
    assert (first["node_rank"], second["node_rank"], second["nnodes"]) == (0, 1, 2)
    assert first["master_port"] == second["master_port"]
    assert first["run_token"] == second["run_token"]


def test_a_run_that_does_not_fit_waits_and_says_why(rt: Runtime) -> None:
    submit(rt)
    submit(rt)
    third = submit(rt).run_id
    assert third not in schedule(rt)
    run = run_row(rt, third)
    assert run.status == "queued"
    assert (
        run.reason == "waiting for 1 node with 8 free h200 GPUs: 0 are free on h200-1, 0 on h200-2"
    )
    assert jobs.get(rt, member("alice"), third).reason == run.reason


def test_a_pass_never_starts_a_run_twice(rt: Runtime, executor: FakeExecutor) -> None:
    submit(rt)
    schedule(rt)
    assert schedule(rt) == []
    assert len(executor.started) == 1


def test_higher_priority_goes_first_then_older(rt: Runtime) -> None:
    old = submit(rt, profiles=["h200:16"]).run_id
    new = submit(rt, profiles=["h200:16"]).run_id
    urgent = submit(rt, profiles=["h200:16"]).run_id
    with rt.transaction() as session:
        row = session.get(Run, urgent)
        assert row is not None
        row.priority = 10
    assert schedule(rt) == [urgent]
    report(rt, urgent, "exited", exit_code=0)
    report(rt, urgent, "exited", exit_code=0, rank=1)
    assert schedule(rt) == [old]
    assert run_row(rt, new).status == "queued"


def test_gpus_of_a_finished_run_are_free_for_the_next_one(rt: Runtime) -> None:
    first = running_run(rt, profiles=["h200:16"])
    waiting = submit(rt, profiles=["h200:16"]).run_id
    assert schedule(rt) == []
    report(rt, first, "exited", exit_code=0)
    assert schedule(rt) == []  # node 1 still runs
    report(rt, first, "exited", exit_code=0, rank=1)
    assert schedule(rt) == [waiting]


def test_a_runner_that_cannot_start_fails_the_run_as_startup_failed(
    rt: Runtime, executor: FakeExecutor
) -> None:
    executor.fail_on_start = 1  # the second node of a two-node run
    run_id = submit(rt, profiles=["h200:16"]).run_id
    schedule(rt)
    run = run_row(rt, run_id)
    assert (run.status, run.end_reason) == ("failed", "startup_failed")
    assert "could not start the runner of node 1" in run.reason
    assert executor.stopped == [executor.started[0][0]]  # the node that did start is stopped
    log_path = Path(run.attempts[0].log_path).with_name("attempt-1.node-1.log")
    assert "exec format error" in log_path.read_text()
    assert rt.wakeups >= 2


def test_a_stop_that_lands_while_starting_stops_the_started_nodes(
    rt: Runtime, executor: FakeExecutor
) -> None:
    run_id = submit(rt).run_id
    orders = dispatch.schedule_pass(rt)
    actions.stop(rt, member("alice"), run_id)  # before the executor started anything
    assert executor.stopped == []
    dispatch.start_attempt(rt, orders[0])
    assert executor.stopped == [executor.started[0][0]]


class GangExecutor(FakeExecutor):
    """Starts whole attempts, as Slurm's executor does; each start waits at ``barrier`` until
    ``barrier.parties`` starts are under way at once (so one-at-a-time starts break it)."""

    def __init__(self, parties: int, fail: str) -> None:
        super().__init__()
        self.barrier = threading.Barrier(parties, timeout=60)  # bounds a broken test's wait
        self.fail = fail  # the start of the attempt named so fails, like an sbatch that errs

    def start_attempt(
        self, job_name: str, nodes: list[NodeLaunch], pools: list[Pool], image: str
    ) -> dict[int, str]:
        self.barrier.wait()
        if job_name == self.fail:
            raise OSError("sbatch: error: Batch job submission failed")
        return {n.rank: f"gang:{job_name}:{n.rank}" for n in nodes}


def test_a_pass_submits_whole_attempts_side_by_side_and_a_failed_one_fails_only_its_run(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second, third = (submit(rt, profiles=["h200:1"]).run_id for _ in range(3))
    monkeypatch.setattr(rt, "executor", GangExecutor(3, fail=f"sf.{second}.1"))
    orders = dispatch.schedule_pass(rt)
    assert [o.run_id for o in orders] == [first, second, third]
    dispatch.start_attempts(rt, orders)  # three starts, all waiting on one another
    for run_id in (first, third):
        run = run_row(rt, run_id)
        assert run.status == "starting"
        assert run.attempts[0].node_records()[0].ref == f"gang:sf.{run_id}.1:0"
    failed = run_row(rt, second)
    assert (failed.status, failed.end_reason) == ("failed", "startup_failed")
    assert "Batch job submission failed" in failed.reason
    assert "Batch job submission failed" in Path(failed.attempts[0].log_path).read_text()


# ---- reconciler -------------------------------------------------------------------------------


def test_a_vanished_runner_with_an_exit_record_is_finalised_from_it(
    rt: Runtime, executor: FakeExecutor
) -> None:
    run_id = running_run(rt)
    write_exit_record(rt, run_id, 0)
    executor.die(executor.started[0][0])
    reconcile.reconcile(rt)
    run = run_row(rt, run_id)
    assert (run.status, run.end_reason, run.exit_code) == ("succeeded", "completed", 0)
    assert run.events[-1].actor == "reconciler"


def test_a_vanished_runner_without_a_record_is_a_lost_node(
    rt: Runtime, executor: FakeExecutor
) -> None:
    run_id = running_run(rt)
    executor.die(executor.started[0][0])
    reconcile.reconcile(rt)
    run = run_row(rt, run_id)
    assert (run.status, run.end_reason) == ("failed", "node_lost")
    assert "node 0 (h200-1) was lost" in run.reason


def test_a_vanished_runner_of_a_stopping_run_means_it_stopped(
    rt: Runtime, executor: FakeExecutor
) -> None:
    run_id = running_run(rt)
    actions.stop(rt, member("alice"), run_id)
    executor.die(executor.started[0][0])
    reconcile.reconcile(rt)
    run = run_row(rt, run_id)
    assert (run.status, run.end_reason) == ("stopped", "stopped_by_user")


def test_a_live_runner_is_left_alone(rt: Runtime) -> None:
    run_id = running_run(rt)
    reconcile.reconcile(rt)
    assert run_row(rt, run_id).status == "running"


def test_a_node_lost_in_a_two_node_run_stops_the_other(rt: Runtime, executor: FakeExecutor) -> None:
    run_id = running_run(rt, profiles=["h200:16"])
    executor.die(executor.started[1][0])
    reconcile.reconcile(rt)
    assert run_row(rt, run_id).end_reason == "node_lost"
    assert executor.stopped == [executor.started[0][0]]


def test_a_placement_whose_start_never_happened_fails_on_the_next_tick(rt: Runtime) -> None:
    run_id = submit(rt).run_id
    dispatch.schedule_pass(rt)  # the server died before start_attempt
    reconcile.reconcile(rt)
    run = run_row(rt, run_id)
    assert (run.status, run.end_reason) == ("failed", "startup_failed")


def test_an_attempt_number_the_runs_folder_shows_was_used_is_never_used_again(
    rt: Runtime, executor: FakeExecutor
) -> None:
    # The database says attempt 1, the folder holds attempt 2's log and records: the database
    # was restored from a backup taken before attempt 2 began.
    run_id = running_run(rt, user="alice", profiles=["h200:1"])
    report(rt, run_id, "exited", exit_code=1)
    layout = RunLayout(dispatch.run_dir_of(rt, run_row(rt, run_id)))
    layout.log(2).write_text("attempt 2's training\n")
    layout.exit_record(2, 0).write_text('{"exit_code": 143}')
    layout.binding(2, 0).write_text("{}")

    assert actions.retry(rt, member("alice"), run_id).accepted
    assert schedule(rt) == [run_id]
    run = run_row(rt, run_id)
    assert run.current_attempt == 3
    assert binding(rt, run_id, 3, 0)["attempt"] == 3
    assert layout.exit_record(2, 0).read_text() == '{"exit_code": 143}'  # untouched
    assert layout.log(2).read_text() == "attempt 2's training\n"
    assert jobs.get(rt, member("alice"), run_id).reason.startswith(
        "attempt 3 placed on h200-1[0] (the run's folder holds attempt 2, which the database "
        "does not know"
    )
    # The next attempt after that follows the database again: 4.
    report(rt, run_id, "exited", exit_code=1, attempt=3)
    assert actions.retry(rt, member("alice"), run_id).accepted
    assert schedule(rt) == [run_id]
    assert run_row(rt, run_id).current_attempt == 4


def test_a_binding_left_by_a_placement_that_never_committed_does_not_skip_its_number(
    rt: Runtime,
) -> None:
    # A leader killed after writing attempt 1's binding but before its placement committed: the
    # database still has the run queued, and nothing ran under attempt 1.
    run_id = submit(rt, user="alice").run_id
    layout = RunLayout(dispatch.run_dir_of(rt, run_row(rt, run_id)))
    layout.state.mkdir(parents=True, exist_ok=True)
    layout.binding(1, 0).write_text("{}")

    assert schedule(rt) == [run_id]
    assert run_row(rt, run_id).current_attempt == 1
    assert binding(rt, run_id, 1, 0)["attempt"] == 1


def test_the_attempt_a_file_of_a_runs_folder_belongs_to_is_read_from_its_name() -> None:
    assert RunLayout.attempt_of("attempt-12.log") == 12
    assert RunLayout.attempt_of("attempt-3.node-1.exit.json") == 3
    assert RunLayout.attempt_of("attempt-3.node-1.events") == 3
    assert RunLayout.attempt_of("run.json") is None
    assert RunLayout.attempt_of("attempt-x.log") is None
    assert RunLayout.attempt_of("attempt-3") is None
