"""Blob endpoints: which digests the caller lacks, streamed uploads, and batches of small ones.

An upload is authenticated before its body is read (the route takes no body parameter, so the
user dependency runs first) and streamed: hashed as it arrives, cut at ``max_blob_bytes``. A
batch (``POST /blobs/batch``, :mod:`starforge.contract.blobbatch`) is cut at its route's body
limit and kept only when every blob in it hashes to its name.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from starforge.contract.api import MissingBlobsRequest, MissingBlobsResponse
from starforge.server.api.authz import Submitter
from starforge.server.api.bodies import body_doc, json_body
from starforge.server.api.deps import RuntimeDep
from starforge.server.services.data import blobs

router = APIRouter()


@router.post(
    "/blobs/missing",
    response_model=MissingBlobsResponse,
    openapi_extra=body_doc(MissingBlobsRequest),
)
def missing(
    body: Annotated[MissingBlobsRequest, json_body(MissingBlobsRequest)],
    rt: RuntimeDep,
    user: Submitter,
) -> MissingBlobsResponse:
    return MissingBlobsResponse(missing=blobs.missing(rt, user.name, body.digests))


@router.post("/blobs/batch", status_code=201)
async def put_batch(request: Request, rt: RuntimeDep, user: Submitter) -> JSONResponse:
    count, size = await blobs.upload_batch(rt, user.name, request.stream())
    return JSONResponse({"blobs": count, "size": size}, status_code=201)


@router.put("/blobs/{sha256}", status_code=201)
async def put_blob(sha256: str, request: Request, rt: RuntimeDep, user: Submitter) -> JSONResponse:
    size = await blobs.upload(rt, user.name, sha256, request.stream())
    return JSONResponse({"sha256": sha256, "size": size}, status_code=201)
