"""Blob endpoints: which digests the server lacks, and streamed uploads."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from starforge.contract.api import MissingBlobsRequest, MissingBlobsResponse
from starforge.server.api.authz import Submitter
from starforge.server.api.deps import RuntimeDep
from starforge.server.services import blobs

router = APIRouter()


@router.post("/blobs/missing", response_model=MissingBlobsResponse)
def missing(body: MissingBlobsRequest, rt: RuntimeDep, _: Submitter) -> MissingBlobsResponse:
    return MissingBlobsResponse(missing=blobs.missing(rt, body.digests))


@router.put("/blobs/{sha256}", status_code=201)
async def put_blob(sha256: str, request: Request, rt: RuntimeDep, _: Submitter) -> JSONResponse:
    size = await blobs.upload(rt, sha256, request.stream())
    return JSONResponse({"sha256": sha256, "size": size}, status_code=201)
