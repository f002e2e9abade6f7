"""``POST /runs/{ref}/export``: ``sf export``, a standalone export step of a run's checkpoint."""

from __future__ import annotations

from fastapi import APIRouter, Response

from starforge.contract.api import ExportRequest, SubmitResponse
from starforge.server.api.authz import ActOnRun
from starforge.server.api.deps import RuntimeDep
from starforge.server.services.workflows import exports

router = APIRouter()


@router.post("/runs/{ref}/export", response_model=SubmitResponse, status_code=201)
def export_run(
    ref: str, body: ExportRequest, response: Response, rt: RuntimeDep, user: ActOnRun
) -> SubmitResponse:
    result = exports.export(rt, user, ref, body)
    response.status_code = 201 if result.created else 200
    return result
