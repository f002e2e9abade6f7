"""The runners' endpoint: lifecycle events, authenticated with the run's own token (by the gate,
:mod:`starforge.server.api.gate`, before the body is read; again in the event's transaction)."""

from __future__ import annotations

from fastapi import APIRouter

from starforge.contract.api import (
    LifecycleAck,
    LifecycleBatch,
    LifecycleBatchAck,
    LifecycleEvent,
)
from starforge.server.api.authz import runner
from starforge.server.api.deps import RuntimeDep, RunToken
from starforge.server.services.runs import lifecycle

router = APIRouter()


@router.post(
    "/runs/{run_id}/lifecycle",
    response_model=LifecycleAck,
    dependencies=[runner(lifecycle.authorize)],
)
def post_event(
    run_id: str,
    body: LifecycleEvent,
    rt: RuntimeDep,
    token: RunToken = None,
) -> LifecycleAck:
    outcome = lifecycle.handle(rt, run_id, token, body)
    return LifecycleAck(accepted=outcome.accepted, message=outcome.message)


@router.post(
    "/runs/{run_id}/lifecycle/batch",
    response_model=LifecycleBatchAck,
    dependencies=[runner(lifecycle.authorize)],
)
def post_events(
    run_id: str,
    body: LifecycleBatch,
    rt: RuntimeDep,
    token: RunToken = None,
) -> LifecycleBatchAck:
    outcomes = lifecycle.handle_many(rt, run_id, token, body.events)
    return LifecycleBatchAck(
        acks=[LifecycleAck(accepted=o.accepted, message=o.message) for o in outcomes]
    )
