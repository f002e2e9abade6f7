"""Blob endpoints: which digests the caller lacks, and streamed uploads.

An upload is authenticated before its body is read (the route takes no body parameter, so the
user dependency runs first) and streamed: hashed as it arrives, cut at ``max_blob_bytes``.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from starforge.contract.api import MissingBlobsRequest, MissingBlobsResponse
from starforge.server.api.deps import RuntimeDep, UserDep
from starforge.server.services import blobs

router = APIRouter()


@router.post("/blobs/missing", response_model=MissingBlobsResponse)
def missing(body: MissingBlobsRequest, rt: RuntimeDep, user: UserDep) -> MissingBlobsResponse:
    return MissingBlobsResponse(missing=blobs.missing(rt, user, body.digests))


@router.put("/blobs/{sha256}", status_code=201)
async def put_blob(sha256: str, request: Request, rt: RuntimeDep, user: UserDep) -> JSONResponse:
    size = await blobs.upload(rt, user, sha256, request.stream())
    return JSONResponse({"sha256": sha256, "size": size}, status_code=201)
