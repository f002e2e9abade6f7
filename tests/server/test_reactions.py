"""What a status change sets off is owed in its transaction and carried out by the leader's pass
(``services/runs/reactions``), exactly once whatever point a crash interrupts it at.

A crash is a runtime dropped without its pass (before), a handler's work done without the row
marked (after); the kill -9 during a publication is tests/integration/test_reactions_crash.py.
A restart is a second runtime on the same database and storage, as a restarted server is."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from starforge.contract.states import JobStatus
from starforge.server import reactions as owed_by
from starforge.server import statemachine
from starforge.server.db.datasets import DatasetVersion
from starforge.server.db.labops import NotifyOutbox
from starforge.server.db.models import Event, Run, utcnow
from starforge.server.db.reactions import Reaction
from starforge.server.runtime import Runtime, build_runtime
from starforge.server.services.data import datasets
from starforge.server.services.runs import lifecycle, reactions
from starforge.server.settings import Settings
from tests.server.factories import FakeExecutor, force, running_run
from tests.server.test_datasets_output import submit_with_output, succeed_with_files
from tests.server.test_notify import hook

FILES = {"a.jsonl": b'{"x": 1}\n', "b/c.jsonl": b'{"x": 2}\n'}


@pytest.fixture
def restarted(settings: Settings, executor: FakeExecutor) -> Iterator[Runtime]:
    """The server again, after the first one died: same database, same storage."""
    again = build_runtime(settings, executor=executor)
    yield again
    again.engine.dispose()


def rows(rt: Runtime) -> list[tuple[str, str, bool]]:
    with rt.reading() as session:
        found = session.execute(
            select(Reaction.run_id, Reaction.kind, Reaction.done_at).order_by(Reaction.id)
        ).all()
    return [(r.run_id, r.kind, r.done_at is not None) for r in found]


def versions(rt: Runtime) -> int:
    with rt.reading() as session:
        return int(session.scalar(select(func.count()).select_from(DatasetVersion)) or 0)


def test_a_success_with_an_output_dataset_owes_its_webhooks_and_its_publication(
    rt: Runtime,
) -> None:
    run_id = submit_with_output(rt, "alice", "alice/scored@v1").run_id
    assert rows(rt) == []  # nothing owed while it waits
    succeed_with_files(rt, run_id, FILES)
    assert rows(rt) == [(run_id, "notify", False), (run_id, "publish_output", False)]
    assert versions(rt) == 0  # owed, not done: the transition itself publishes nothing


def test_a_reaction_owed_when_the_server_died_is_done_by_the_next_one(
    rt: Runtime, restarted: Runtime
) -> None:
    run_id = submit_with_output(rt, "alice", "alice/scored@v1").run_id
    succeed_with_files(rt, run_id, FILES)  # then the server dies before its pass
    assert reactions.run_due(restarted) == 2
    assert rows(restarted) == [(run_id, "notify", True), (run_id, "publish_output", True)]
    view = datasets.show(restarted, "alice", "alice/scored@v1")
    assert sorted(f.path for f in view.files) == ["a.jsonl", "b/c.jsonl"]
    assert reactions.run_due(restarted) == 0  # done once: nothing left


def test_a_publication_done_but_not_marked_is_not_made_twice(
    rt: Runtime, restarted: Runtime
) -> None:
    run_id = submit_with_output(rt, "alice", "alice/scored@v1").run_id
    succeed_with_files(rt, run_id, FILES)
    assert datasets.publish_output(rt, run_id) is not None  # the handler's work, then a crash
    assert reactions.run_due(restarted) == 2
    assert versions(restarted) == 1
    assert rows(restarted)[-1] == (run_id, "publish_output", True)


def test_webhooks_are_owed_once_per_terminal_status_with_the_status_it_had(rt: Runtime) -> None:
    endpoint = hook(rt)
    run_id = running_run(rt, user="alice", profiles=["h200:1"])
    with rt.transaction() as session:  # a failure that auto-retry queues in the same transaction
        run = session.get(Run, run_id)
        assert run is not None
        statemachine.transition(session, run, JobStatus.FAILED, reason="t", actor="t")
        statemachine.transition(session, run, JobStatus.QUEUED, reason="retry", actor="t")
    assert reactions.run_due(rt) == 1
    assert reactions.run_due(rt) == 0
    with rt.reading() as session:
        owed = session.execute(select(NotifyOutbox.endpoint_id, NotifyOutbox.payload)).all()
    assert [(e, p["status"]) for e, p in owed] == [(endpoint, "failed")]


def test_a_failing_handler_is_retried_later_and_says_why_in_the_runs_events(rt: Runtime) -> None:
    run_id = submit_with_output(rt, "alice", "alice/scored@v1").run_id
    succeed_with_files(rt, run_id, FILES)
    blobs = rt.storage.root / "blobs"
    moved = blobs.with_name("blobs.away")
    blobs.rename(moved)
    blobs.write_text("not a folder: storing a blob fails\n")  # the disk refuses, for now
    assert reactions.run_due(rt) == 1  # the webhooks; the publication failed
    with rt.reading() as session:
        row = session.scalars(select(Reaction).where(Reaction.kind == "publish_output")).one()
        said = session.scalars(select(Event.reason).where(Event.actor == "reactions")).all()
    assert (row.done_at, row.tries) == (None, 1) and row.last_error
    assert said and said[0].startswith("publish_output failed (try 1): ")
    assert "trying again in 1 s" in said[0]
    assert reactions.run_due(rt) == 0  # not due again yet
    blobs.unlink()
    moved.rename(blobs)
    assert reactions.run_due(rt, now=utcnow() + timedelta(seconds=2)) == 1
    assert versions(rt) == 1


def test_a_refused_publication_is_final_and_said_in_the_runs_log(rt: Runtime) -> None:
    run_id = submit_with_output(rt, "alice", "alice/scored@v1").run_id
    succeed_with_files(rt, run_id, {"key.pem": b"-----BEGIN RSA PRIVATE KEY-----\nabc\n"})
    assert reactions.run_due(rt) == 2
    with rt.reading() as session:
        row = session.scalars(select(Reaction).where(Reaction.kind == "publish_output")).one()
    assert row.done_at is not None and "could not publish --output-dataset" in row.last_error
    assert versions(rt) == 0


def test_the_kinds_owed_follow_the_table(rt: Runtime) -> None:
    run_id = running_run(rt, user="alice", profiles=["h200:1"])
    force(rt, run_id, JobStatus.STOPPING, JobStatus.STOPPED)
    assert [k for _, k, _ in rows(rt)] == ["notify"]
    assert owed_by.KINDS == ("notify", "publish_output")
    assert set(reactions.HANDLERS) == set(owed_by.KINDS)


def test_a_failure_the_platform_retries_by_itself_owes_no_webhook_its_real_end_does(
    rt: Runtime,
) -> None:
    hook(rt)
    run_id = running_run(rt, user="alice", profiles=["h200:1"])
    with rt.transaction() as session:  # lifecycle.finish_attempt's auto-retry
        run = session.get(Run, run_id)
        assert run is not None
        statemachine.transition(session, run, JobStatus.FAILED, reason="t", actor="t")
        statemachine.transition(
            session, run, JobStatus.QUEUED, reason="auto-retry", actor=lifecycle.AUTO_RETRY
        )
    force(rt, run_id, JobStatus.STARTING, JobStatus.RUNNING, JobStatus.FAILED)  # for good
    assert reactions.run_due(rt) == 2  # both endings' reactions done
    with rt.reading() as session:
        sent = session.execute(select(NotifyOutbox.payload)).scalars().all()
    assert [p["status"] for p in sent] == ["failed"]  # the run's one real failure


def test_reactions_of_a_newer_servers_kind_never_hold_back_the_ones_this_server_knows(
    rt: Runtime,
) -> None:
    run_id = submit_with_output(rt, "alice", "alice/scored@v1").run_id
    with rt.transaction() as session:  # more than a batch, owed first, by a newer server
        run = session.get(Run, run_id)
        assert run is not None
        owed_by.record(session, run, ["archive"] * (reactions.BATCH + 1), utcnow())
    succeed_with_files(rt, run_id, FILES)
    assert reactions.run_due(rt) == 2
    assert versions(rt) == 1
    assert [r for r in rows(rt) if r[1] == "archive"] == [(run_id, "archive", False)] * (
        reactions.BATCH + 1
    )  # left owed for the server that knows them
