"""Fencing: a pass of the leader's loops carries its term's epoch, and once another term began
its transaction is refused and writes nothing; the API's transactions are never fenced.
(tests/server runs on SQLite and again on PostgreSQL, where the epoch is read FOR SHARE.)"""

from __future__ import annotations

import contextvars
import os

import pytest
from sqlalchemy import select

from starforge.server import fence
from starforge.server.db.leadership import Leadership
from starforge.server.db.models import Run
from starforge.server.runtime import Runtime

from .factories import run_row, submit


def in_term(term: int, fn: object) -> object:
    """Call ``fn`` as a pass of ``term`` would be: with the term in its context."""
    ctx = contextvars.copy_context()

    def call() -> object:
        fence.TERM.set(term)
        return fn()  # type: ignore[operator]

    return ctx.run(call)


def rename(rt: Runtime, run_id: str, reason: str) -> None:
    with rt.transaction() as session:
        run = session.get(Run, run_id)
        assert run is not None
        run.reason = reason


def test_a_pass_of_an_ended_term_commits_nothing(rt: Runtime) -> None:
    run_id = submit(rt, "alice", profiles=["h100:1"]).run_id
    first = fence.begin_term(rt.engine)
    in_term(first, lambda: rename(rt, run_id, "written in term one"))
    assert run_row(rt, run_id).reason == "written in term one"

    second = fence.begin_term(rt.engine)  # another process is elected
    assert second == first + 1
    with pytest.raises(fence.Deposed, match=f"term {first} is over"):
        in_term(first, lambda: rename(rt, run_id, "written by the deposed leader"))
    assert run_row(rt, run_id).reason == "written in term one"
    in_term(second, lambda: rename(rt, run_id, "written in term two"))
    assert run_row(rt, run_id).reason == "written in term two"


def test_requests_outside_the_loops_are_never_fenced(rt: Runtime) -> None:
    run_id = submit(rt, "alice", profiles=["h100:1"]).run_id
    fence.begin_term(rt.engine)
    fence.begin_term(rt.engine)
    rename(rt, run_id, "an API write")  # no term in its context
    assert run_row(rt, run_id).reason == "an API write"


def test_each_term_records_its_holder(rt: Runtime) -> None:
    term = fence.begin_term(rt.engine)
    with rt.reading() as session:
        row = session.execute(select(Leadership.epoch, Leadership.holder)).one()
    assert row.epoch == term and row.holder.endswith(f":{os.getpid()}")
