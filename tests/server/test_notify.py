"""Webhook outbox and signatures through the services (no sockets: delivery itself is tested
end to end in tests/integration/test_lab_ops.py)."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from sqlalchemy import select

from starforge.contract.labops import EndpointCreate
from starforge.contract.states import JobStatus
from starforge.server import statemachine
from starforge.server.db.labops import NotifyOutbox
from starforge.server.db.models import Run
from starforge.server.runtime import Runtime
from starforge.server.services.labops import notify
from starforge.server.services.runs import actions, reactions

from .factories import member, report, running_run, submit


def outbox(rt: Runtime) -> list[tuple[str, str, str, dict]]:
    """The webhook outbox once the leader's reactions pass has carried out what is owed."""
    reactions.run_due(rt)
    with rt.transaction() as session:
        rows = session.scalars(select(NotifyOutbox).order_by(NotifyOutbox.id)).all()
        return [(o.endpoint_id, o.run_id, o.event, dict(o.payload)) for o in rows]


def hook(rt: Runtime, user: str = "alice", **fields: object) -> str:
    body = EndpointCreate.model_validate({"url": "http://127.0.0.1:9/hook", **fields})
    return notify.add(rt, user, body).id


def test_a_run_that_ends_owes_each_following_endpoint_one_payload(rt: Runtime) -> None:
    every = hook(rt)
    failures = hook(rt, events=["failed"])
    hook(rt, "bob")  # another user's endpoint never hears of alice's runs
    other_project = hook(rt, project="elsewhere")
    run_id = running_run(rt, user="alice", profiles=["h200:1"])
    assert outbox(rt) == []  # nothing owed while it runs
    report(rt, run_id, "exited", exit_code=0)
    [(endpoint, owed_run, event, payload)] = outbox(rt)
    assert (endpoint, owed_run, event) == (every, run_id, "succeeded")
    assert failures != endpoint != other_project
    assert payload["event"] == "run.succeeded" and payload["end_reason"] == "completed"
    assert (payload["run_id"], payload["user"], payload["project"]) == (run_id, "alice", "proj")


def test_a_stopped_queued_run_is_a_terminal_status_too(rt: Runtime) -> None:
    endpoint = hook(rt, events=["stopped"])
    run_id = submit(rt, "alice", profiles=["h200:1"]).run_id
    assert actions.stop(rt, member("alice"), run_id).accepted
    assert [(e, r, ev) for e, r, ev, _ in outbox(rt)] == [(endpoint, run_id, "stopped")]


def test_the_payload_is_owed_only_if_the_status_change_commits(rt: Runtime) -> None:
    hook(rt)
    run_id = submit(rt, "alice", profiles=["h200:1"]).run_id
    with pytest.raises(RuntimeError), rt.transaction() as session:
        run = session.get(Run, run_id)
        assert run is not None
        statemachine.transition(session, run, JobStatus.STOPPED, reason="t", actor="t")
        raise RuntimeError("the caller's transaction fails after the change")
    assert outbox(rt) == []


def test_a_receiver_verifies_the_signature_over_timestamp_and_body() -> None:
    body, secret, ts = b'{"run_id":"r-1"}', "s3cret", 1_700_000_000
    header = notify.sign(secret, ts, body)
    want = hmac.new(secret.encode(), b"1700000000." + body, hashlib.sha256).hexdigest()
    assert header == f"sha256={want}"
    assert notify.sign(secret, ts + 1, body) != header  # a replay with a new timestamp fails
    assert notify.sign("other", ts, body) != header


def test_retries_back_off_exponentially_up_to_the_maximum(rt: Runtime) -> None:
    s = rt.settings.model_copy(update={"notify_backoff_s": 2.0, "notify_backoff_max_s": 30.0})
    assert [notify.backoff_s(s, n) for n in range(1, 7)] == [2, 4, 8, 16, 30, 30]
