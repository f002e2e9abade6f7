"""Submitting, listing and reading runs, the user actions on them (stop, pause, resume, retry;
each answered accepted or rejected-with-reason), and reading their logs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from starforge.contract.api import (
    ActionResult,
    LogChunk,
    RunList,
    RunView,
    SubmitRequest,
    SubmitResponse,
)
from starforge.contract.states import JobStatus
from starforge.server.api.authz import ActOnRun, Reader, ReadRun, Submitter
from starforge.server.api.deps import RuntimeDep
from starforge.server.services import actions, jobs, logs

router = APIRouter()


@router.post("/jobs", response_model=SubmitResponse, status_code=201)
def submit(
    body: SubmitRequest, response: Response, rt: RuntimeDep, user: Submitter
) -> SubmitResponse:
    result = jobs.submit(rt, user, body)
    response.status_code = 201 if result.created else 200
    return result


@router.get("/runs", response_model=RunList)
def list_runs(
    rt: RuntimeDep,
    user: Reader,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    status: JobStatus | None = None,
) -> RunList:
    return RunList(runs=jobs.list_runs(rt, user, limit=limit, status=status))


@router.get("/runs/{ref}", response_model=RunView)
def get_run(ref: str, rt: RuntimeDep, user: ReadRun) -> RunView:
    return jobs.get(rt, user, ref)


@router.post("/runs/{ref}/stop", response_model=ActionResult)
def stop_run(ref: str, rt: RuntimeDep, user: ActOnRun) -> ActionResult:
    return actions.stop(rt, user, ref)


@router.post("/runs/{ref}/pause", response_model=ActionResult)
def pause_run(ref: str, rt: RuntimeDep, user: ActOnRun) -> ActionResult:
    return actions.pause(rt, user, ref)


@router.post("/runs/{ref}/resume", response_model=ActionResult)
def resume_run(ref: str, rt: RuntimeDep, user: ActOnRun) -> ActionResult:
    return actions.resume(rt, user, ref)


@router.post("/runs/{ref}/retry", response_model=ActionResult)
def retry_run(ref: str, rt: RuntimeDep, user: ActOnRun) -> ActionResult:
    return actions.retry(rt, user, ref)


@router.get("/runs/{ref}/logs", response_model=LogChunk)
async def run_logs(
    ref: str,
    rt: RuntimeDep,
    user: ReadRun,
    attempt: Annotated[int | None, Query(ge=1)] = None,
    offset: Annotated[int, Query(ge=0)] = 0,
    wait: Annotated[float, Query(ge=0)] = 0.0,
) -> LogChunk:
    return await logs.read(rt, user, ref, attempt=attempt, offset=offset, wait=wait)
