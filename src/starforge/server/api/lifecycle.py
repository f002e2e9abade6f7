"""The runners' endpoint: lifecycle events, authenticated with the run's own token."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header

from starforge.contract.api import RUN_TOKEN_HEADER, LifecycleAck, LifecycleEvent
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
