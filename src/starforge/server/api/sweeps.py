"""Sweeps: submit a grid of variants at once, list and read them ranked, their runs, stop them.

A sweep is its owner's like a run: a viewer or member reaches only their own (another's answers
404), an operator or admin everyone's; the rules are the runs' own (``authz``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from starforge.contract.api import RunList
from starforge.contract.sweeps import SweepCreated, SweepList, SweepRequest, SweepStopped, SweepView
from starforge.server.api.authz import ActOnRun, Reader, ReadRun, Submitter
from starforge.server.api.bodies import body_doc, json_body
from starforge.server.api.deps import RuntimeDep
from starforge.server.services.workflows import sweeps

router = APIRouter()


@router.post(
    "/sweeps", response_model=SweepCreated, status_code=201, openapi_extra=body_doc(SweepRequest)
)
def submit_sweep(
    body: Annotated[SweepRequest, json_body(SweepRequest)],
    response: Response,
    rt: RuntimeDep,
    user: Submitter,
) -> SweepCreated:
    result = sweeps.submit(rt, user.name, body)
    response.status_code = 201 if result.created else 200
    return result


@router.get("/sweeps", response_model=SweepList)
def list_sweeps(
    rt: RuntimeDep, user: Reader, limit: Annotated[int, Query(ge=1, le=200)] = 50
) -> SweepList:
    return SweepList(sweeps=sweeps.list_sweeps(rt, user, limit=limit))


@router.get("/sweeps/{sweep_id}", response_model=SweepView)
def get_sweep(
    sweep_id: str,
    rt: RuntimeDep,
    user: ReadRun,
    metric: Annotated[str, Query(max_length=200)] = "",
) -> SweepView:
    return sweeps.get(rt, user, sweep_id, metric)


@router.get("/sweeps/{sweep_id}/runs", response_model=RunList)
def sweep_runs(sweep_id: str, rt: RuntimeDep, user: ReadRun) -> RunList:
    return RunList(runs=sweeps.runs(rt, user, sweep_id))


@router.post("/sweeps/{sweep_id}/stop", response_model=SweepStopped)
def stop_sweep(sweep_id: str, rt: RuntimeDep, user: ActOnRun) -> SweepStopped:
    return SweepStopped(results=sweeps.stop(rt, user, sweep_id))
