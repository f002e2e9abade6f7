"""Submit (idempotent), list, resolve by prefix, and stop in every status."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import event, func, select

from starforge.contract.errors import AmbiguousRun, MissingBlobs, Rejected, RunNotFound
from starforge.contract.jobspec import FileEntry
from starforge.contract.states import EndReason, JobStatus
from starforge.server.db.models import Event, Run
from starforge.server.runtime import Runtime
from starforge.server.services.data import blobs, images
from starforge.server.services.runs import actions, jobs

from .factories import (
    FakeExecutor,
    force,
    insert_run,
    member,
    report,
    request,
    run_row,
    running_run,
    schedule,
    submit,
)


def count_runs(rt: Runtime) -> int:
    with rt.transaction() as session:
        return int(session.scalar(select(func.count()).select_from(Run)) or 0)


# ---- submit -----------------------------------------------------------------------------------


def test_submit_queues_the_run_records_one_event_and_wakes_the_scheduler(rt: Runtime) -> None:
    resp = submit(rt)
    run = run_row(rt, resp.run_id)
    assert run.status == "queued" and run.gpus == 8 and run.current_attempt == 0
    assert [(e.src, e.dst) for e in run.events] == [(None, "queued")]
    assert rt.wakeups == 1


def test_two_requests_with_one_key_make_one_run(rt: Runtime) -> None:
    req = request(rt, key="same-key-123")
    first = jobs.submit(rt, "alice", req)
    again = jobs.submit(rt, "alice", req)
    assert first.created and not again.created
    assert again.run_id == first.run_id and "earlier request" in again.message
    assert count_runs(rt) == 1


def test_the_same_key_from_another_user_is_another_run(rt: Runtime) -> None:
    req = request(rt, key="same-key-123")
    assert jobs.submit(rt, "alice", req).run_id != jobs.submit(rt, "bob", req).run_id


def test_concurrent_requests_with_one_key_make_one_run(rt: Runtime) -> None:
    req = request(rt, key="raced-key-1")
    barrier = threading.Barrier(6)
    results: list[tuple[str, bool]] = []
    errors: list[BaseException] = []

    def send() -> None:
        barrier.wait()
        try:
            resp = jobs.submit(rt, "alice", req)
            results.append((resp.run_id, resp.created))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=send) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len({run_id for run_id, _ in results}) == 1
    assert sorted(created for _, created in results) == [False] * 5 + [True]
    assert count_runs(rt) == 1
    assert not (rt.storage.root / "runs").exists()  # no files at all until the run is placed


def test_a_submit_reads_in_three_statements_and_writes_in_three(rt: Runtime) -> None:
    submit(rt)  # the first one may prepare what later ones reuse
    req = request(rt)
    seen: list[str] = []

    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        seen.append(statement.split(None, 1)[0].upper())

    event.listen(rt.engine, "before_cursor_execute", record)
    try:
        resp = jobs.submit(rt, "alice", req)
    finally:
        event.remove(rt.engine, "before_cursor_execute", record)
    assert resp.created and resp.queue_position == 2
    assert seen == ["SELECT", "SELECT", "SELECT", "INSERT", "INSERT", "SELECT"]


def test_the_admins_allowlist_and_framework_default_apply_at_submit(rt: Runtime) -> None:
    with rt.transaction() as session:
        images.allow(session, "other.example", "alice")
    with pytest.raises(Rejected) as refused:
        submit(rt)
    assert "registry registry.example is not on this server's allowlist" in refused.value.message
    assert "allowed: other.example" in refused.value.message
    with rt.transaction() as session:
        images.allow(session, "registry.example", "alice")
        images.set_default(session, "trl", "registry.example/trl:v2", "alice")
    assert submit(rt).created
    with rt.reading() as session:  # both tables, as the submit read them: one statement
        defaults, entries = images.admission_tables(session, rt.settings)
    assert defaults == {"trl": "registry.example/trl:v2"}
    assert entries == ["other.example", "registry.example"]


def test_a_file_only_another_user_uploaded_is_named_missing_at_submit(rt: Runtime) -> None:
    req = request(rt)
    data = b"bob's own file\n"
    digest = rt.storage.put_bytes(data)
    blobs.record(rt, "bob", digest)
    req.manifest.files.append(
        FileEntry(path="experiments/exp/extra.txt", sha256=digest, size=len(data))
    )
    with pytest.raises(MissingBlobs) as refused:
        jobs.submit(rt, "alice", req)
    assert refused.value.details["missing"] == [digest]
    assert count_runs(rt) == 0


# ---- read -------------------------------------------------------------------------------------


def test_a_run_is_found_by_any_unambiguous_prefix(rt: Runtime) -> None:
    insert_run(rt, "r-abcde00001")
    insert_run(rt, "r-abxyz00002")
    with rt.transaction() as session:
        assert jobs.resolve(session, member("alice"), "r-abc").id == "r-abcde00001"
        assert jobs.resolve(session, member("alice"), "abx").id == "r-abxyz00002"
        assert jobs.resolve(session, member("alice"), "r-abcde00001").id == "r-abcde00001"


def test_an_ambiguous_prefix_lists_the_candidates(rt: Runtime) -> None:
    insert_run(rt, "r-abcde00001")
    insert_run(rt, "r-abxyz00002")
    with rt.transaction() as session, pytest.raises(AmbiguousRun) as err:
        jobs.resolve(session, member("alice"), "r-ab")
    assert sorted(err.value.details["candidates"]) == ["r-abcde00001", "r-abxyz00002"]
    assert "r-abcde00001" in err.value.message


def test_an_ambiguous_prefix_lists_at_most_eight_candidates(rt: Runtime) -> None:
    for i in range(10):
        insert_run(rt, f"r-aaaaaaaa{i:02d}", minutes=i)
    with rt.transaction() as session, pytest.raises(AmbiguousRun) as err:
        jobs.resolve(session, member("alice"), "aaa")
    assert len(err.value.details["candidates"]) == 8
    assert err.value.message.endswith("...")


def test_an_unknown_or_foreign_run_is_not_found(rt: Runtime) -> None:
    insert_run(rt, "r-bobsrun001", user="bob")
    with rt.transaction() as session:
        with pytest.raises(RunNotFound):
            jobs.resolve(session, member("alice"), "r-zzz")
        with pytest.raises(RunNotFound):
            jobs.resolve(session, member("alice"), "r-bobsrun001")
        with pytest.raises(RunNotFound):
            jobs.resolve(session, member("alice"), "%")  # LIKE wildcards match nothing


def test_the_list_is_the_users_runs_newest_first_filtered_by_status(rt: Runtime) -> None:
    insert_run(rt, "r-old0000001", minutes=0)
    insert_run(rt, "r-new0000002", minutes=5)
    insert_run(rt, "r-bob0000003", user="bob", minutes=9)
    force(rt, "r-old0000001", JobStatus.STOPPED)
    assert [r.run_id for r in jobs.page(rt, member("alice")).runs] == [
        "r-new0000002",
        "r-old0000001",
    ]
    assert [r.run_id for r in jobs.page(rt, member("alice"), status=JobStatus.STOPPED).runs] == [
        "r-old0000001"
    ]
    assert [r.run_id for r in jobs.page(rt, member("alice"), limit=1).runs] == ["r-new0000002"]


def test_a_run_view_carries_its_attempts_events_and_spec(rt: Runtime) -> None:
    run_id = running_run(rt)
    view = jobs.get(rt, member("alice"), run_id[:6])
    assert view.status is JobStatus.RUNNING and view.profiles == ["h200:8"]
    assert [a.number for a in view.attempts] == [1]
    assert view.attempts[0].log_path.endswith("logs/attempt-1.log")
    assert [e.dst for e in view.events] == ["queued", "starting", "running"]
    assert view.spec is not None and view.git_commit == "a" * 40
    assert view.pools[0].series == "h200" and view.gpus == 8


# ---- stop -------------------------------------------------------------------------------------


def test_stop_of_a_queued_run_stops_it_without_starting_it(
    rt: Runtime, executor: FakeExecutor
) -> None:
    run_id = submit(rt).run_id
    result = actions.stop(rt, member("alice"), run_id)
    assert result.accepted and result.status is JobStatus.STOPPED
    assert schedule(rt) == [] and executor.started == []
    run = run_row(rt, run_id)
    assert run.end_reason == EndReason.STOPPED_BY_USER and run.ended_at is not None


def test_stop_of_a_running_run_signals_its_runner_and_waits_for_its_exit(
    rt: Runtime, executor: FakeExecutor
) -> None:
    run_id = running_run(rt)
    result = actions.stop(rt, member("alice"), run_id)
    assert result.accepted and result.status is JobStatus.STOPPING
    assert executor.stopped == [executor.started[0][0]]
    report(rt, run_id, "exited", exit_code=143)
    run = run_row(rt, run_id)
    assert (run.status, run.end_reason, run.exit_code) == ("stopped", "stopped_by_user", 143)


def test_stop_of_a_starting_run_goes_through_stopping(rt: Runtime, executor: FakeExecutor) -> None:
    run_id = submit(rt).run_id
    schedule(rt)
    assert actions.stop(rt, member("alice"), run_id).status is JobStatus.STOPPING
    assert len(executor.stopped) == 1


def test_stop_of_a_stopping_run_is_rejected_with_a_reason(rt: Runtime) -> None:
    run_id = running_run(rt)
    actions.stop(rt, member("alice"), run_id)
    again = actions.stop(rt, member("alice"), run_id)
    assert not again.accepted and again.message == f"run {run_id} is already stopping"


@pytest.mark.parametrize("final", [JobStatus.SUCCEEDED, JobStatus.FAILED])
def test_stop_of_a_finished_run_is_rejected_with_its_status(rt: Runtime, final: JobStatus) -> None:
    run_id = running_run(rt)
    report(rt, run_id, "exited", exit_code=0 if final is JobStatus.SUCCEEDED else 1)
    result = actions.stop(rt, member("alice"), run_id)
    assert not result.accepted and result.status is final
    assert result.message == f"run {run_id} already {final.value}"


def test_stop_of_a_paused_run_stops_it_at_once(rt: Runtime) -> None:
    run_id = running_run(rt)
    force(rt, run_id, JobStatus.PAUSING, JobStatus.PAUSED)
    assert actions.stop(rt, member("alice"), run_id).status is JobStatus.STOPPED


def test_stop_of_a_pausing_run_goes_through_stopping(rt: Runtime) -> None:
    run_id = running_run(rt)
    force(rt, run_id, JobStatus.PAUSING)
    assert actions.stop(rt, member("alice"), run_id).status is JobStatus.STOPPING


def test_stop_records_who_stopped_the_run(rt: Runtime) -> None:
    run_id = submit(rt).run_id
    actions.stop(rt, member("alice"), run_id)
    with rt.transaction() as session:
        last = session.scalars(select(Event).order_by(Event.id.desc())).first()
        assert last is not None and (last.dst, last.actor) == ("stopped", "alice")
