"""Submitting, listing and reading runs, the user actions on them (stop, pause, resume, retry;
each answered accepted or rejected-with-reason), rerunning one, and reading their logs."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

from fastapi import APIRouter, Query, Response

from starforge.contract.api import (
    INT32_MAX,
    ActionResult,
    LogChunk,
    RunList,
    RunView,
    SubmitRequest,
    SubmitResponse,
)
from starforge.contract.reruns import RerunRequest, RerunResponse
from starforge.contract.states import JobStatus
from starforge.server.api.authz import ActOnRun, Reader, ReadRun, Submitter
from starforge.server.api.bodies import body_doc, json_body
from starforge.server.api.deps import RuntimeDep
from starforge.server.services.observability import logs
from starforge.server.services.runs import actions, jobs, reruns

if TYPE_CHECKING:
    from starforge.server.runtime import Runtime
    from starforge.server.services.access.users import Caller

router = APIRouter()


@router.post(
    "/jobs", response_model=SubmitResponse, status_code=201, openapi_extra=body_doc(SubmitRequest)
)
def submit(
    body: Annotated[SubmitRequest, json_body(SubmitRequest)], rt: RuntimeDep, user: Submitter
) -> Response:
    """201 with the new run, or 200 with the run an earlier request with the key made (the
    caller was authenticated by the gate before the body was read)."""
    result = jobs.submit(rt, user.name, body)
    # Encoded here, once: given a model, FastAPI would validate it against response_model
    # again and encode it in two steps, on the event loop.
    return Response(
        result.model_dump_json(),
        status_code=201 if result.created else 200,
        media_type="application/json",
    )


@router.get("/runs", response_model=RunList)
def list_runs(
    rt: RuntimeDep,
    user: Reader,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    status: JobStatus | None = None,
    hide_steps: bool = False,
    before: Annotated[str | None, Query(max_length=64)] = None,
    project: Annotated[str | None, Query(max_length=100)] = None,
) -> RunList:
    """A page of runs, newest first; ``before`` is the previous page's ``next_before``."""
    return jobs.page(
        rt, user, limit=limit, status=status, hide_steps=hide_steps, before=before, project=project
    )


@router.get("/runs/{ref}", response_model=RunView)
def get_run(ref: str, rt: RuntimeDep, user: ReadRun) -> RunView:
    return jobs.get(rt, user, ref)


def _action_route(name: str, act: Callable[[Runtime, Caller, str], ActionResult]) -> None:
    """``POST /runs/{ref}/NAME``: one user action on a run, answered accepted or with why not."""

    def route(ref: str, rt: RuntimeDep, user: ActOnRun) -> ActionResult:
        return act(rt, user, ref)

    router.add_api_route(
        f"/runs/{{ref}}/{name}",
        route,
        methods=["POST"],
        response_model=ActionResult,
        name=f"{name}_run",
    )


for _name, _act in (
    ("stop", actions.stop),
    ("pause", actions.pause),
    ("resume", actions.resume),
    ("retry", actions.retry),
):
    _action_route(_name, _act)


@router.post("/runs/{ref}/rerun", response_model=RerunResponse, status_code=201)
def rerun_run(
    ref: str, body: RerunRequest, response: Response, rt: RuntimeDep, user: ActOnRun
) -> RerunResponse:
    """201 with the new run made from run ``ref``'s record, or 200 with the run an earlier
    request with the key made; a run the caller cannot read is not found."""
    result = reruns.rerun(rt, user, ref, body)
    response.status_code = 201 if result.created else 200
    return result


@router.get("/runs/{ref}/logs", response_model=LogChunk)
async def run_logs(
    ref: str,
    rt: RuntimeDep,
    user: ReadRun,
    attempt: Annotated[int | None, Query(ge=1)] = None,
    offset: Annotated[int, Query(ge=0)] = 0,
    wait: Annotated[float, Query(ge=0)] = 0.0,
    tail: Annotated[int | None, Query(ge=0)] = None,
    node: Annotated[int, Query(ge=0, le=INT32_MAX)] = 0,
) -> LogChunk:
    """A chunk of one node's log (node 0's by default); the answer says how many nodes the
    attempt has, so a client reads each node's log in turn."""
    return await logs.read(
        rt, user, ref, attempt=attempt, offset=offset, wait=wait, tail=tail, node=node
    )
