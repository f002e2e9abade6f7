"""The runners' endpoint: lifecycle events, authenticated with the run's own token (by the gate,
:mod:`starforge.server.api.gate`, before the body is read; again in the event's transaction)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Request

from starforge.contract.api import (
    RUN_TOKEN_HEADER,
    LifecycleAck,
    LifecycleBatch,
    LifecycleBatchAck,
    LifecycleEvent,
)
from starforge.server.api.authz import runner
from starforge.server.runtime import Runtime
from starforge.server.services.runs import lifecycle

router = APIRouter()


def _runtime(request: Request) -> Runtime:
    # Read here, not through a sync dependency: FastAPI runs each one in a worker thread, a
    # hop that cost as much as a runner's report itself (every runner sends two or more).
    runtime: Runtime = request.app.state.runtime
    return runtime


@router.post(
    "/runs/{run_id}/lifecycle",
    response_model=LifecycleAck,
    dependencies=[runner(lifecycle.authorize)],
)
def post_event(
    run_id: str,
    body: LifecycleEvent,
    request: Request,
    token: Annotated[str | None, Header(alias=RUN_TOKEN_HEADER)] = None,
) -> LifecycleAck:
    outcome = lifecycle.handle(_runtime(request), run_id, token, body)
    return LifecycleAck(accepted=outcome.accepted, message=outcome.message)


@router.post(
    "/runs/{run_id}/lifecycle/batch",
    response_model=LifecycleBatchAck,
    dependencies=[runner(lifecycle.authorize)],
)
def post_events(
    run_id: str,
    body: LifecycleBatch,
    request: Request,
    token: Annotated[str | None, Header(alias=RUN_TOKEN_HEADER)] = None,
) -> LifecycleBatchAck:
    outcomes = lifecycle.handle_many(_runtime(request), run_id, token, body.events)
    return LifecycleBatchAck(
        acks=[LifecycleAck(accepted=o.accepted, message=o.message) for o in outcomes]
    )
