"""The runners' endpoint: lifecycle events, authenticated with the run's own token."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header

from starforge.contract.api import (
    RUN_TOKEN_HEADER,
    LifecycleAck,
    LifecycleBatch,
    LifecycleBatchAck,
    LifecycleEvent,
)
from starforge.server.api.authz import RUNNER, authorize
from starforge.server.api.deps import RuntimeDep
from starforge.server.services import lifecycle

router = APIRouter()


@router.post(
    "/runs/{run_id}/lifecycle", response_model=LifecycleAck, dependencies=[authorize(RUNNER)]
)
def post_event(
    run_id: str,
    body: LifecycleEvent,
    rt: RuntimeDep,
    token: Annotated[str | None, Header(alias=RUN_TOKEN_HEADER)] = None,
) -> LifecycleAck:
    outcome = lifecycle.handle(rt, run_id, token, body)
    return LifecycleAck(accepted=outcome.accepted, message=outcome.message)


@router.post(
    "/runs/{run_id}/lifecycle/batch",
    response_model=LifecycleBatchAck,
    dependencies=[authorize(RUNNER)],
)
def post_events(
    run_id: str,
    body: LifecycleBatch,
    rt: RuntimeDep,
    token: Annotated[str | None, Header(alias=RUN_TOKEN_HEADER)] = None,
) -> LifecycleBatchAck:
    outcomes = lifecycle.handle_many(rt, run_id, token, body.events)
    return LifecycleBatchAck(
        acks=[LifecycleAck(accepted=o.accepted, message=o.message) for o in outcomes]
    )
