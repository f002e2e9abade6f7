"""Metrics: the job's ingest endpoint (run token) and the user's queries (bearer token).

Ingest checks, in this order and before it reads a byte of the body: the run exists, the token
is the run's current one, the run has not ended (:func:`metrics.authorize`, which the gate runs
from the headers: :mod:`starforge.server.api.gate`), and the body is declared JSON (415
otherwise: a browser's no-preflight ``text/plain`` POST is never parsed). The body is then read up
to the configured ``max_ingest_bytes`` (:mod:`starforge.server.api.bodies` cuts it there with a
413), parsed straight from its bytes by pydantic's JSON parser (one pass, no intermediate Python
objects; a large batch in a worker thread, :func:`bodies.parse_json`), and written in a worker
thread, so a large batch never stalls the event loop that serves log streams.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Query, Request

from starforge.contract.api import (
    IngestAck,
    IngestRequest,
    MetricsView,
    ProgressList,
    RunMetaView,
)
from starforge.server.api.authz import Reader, ReadRun, runner
from starforge.server.api.bodies import parse_json, require_json
from starforge.server.api.deps import RuntimeDep, RunToken
from starforge.server.services.observability import metrics

router = APIRouter()


@router.post(
    "/runs/{run_id}/ingest", response_model=IngestAck, dependencies=[runner(metrics.authorize)]
)
async def ingest(
    run_id: str,
    request: Request,
    rt: RuntimeDep,
    token: RunToken = None,
) -> IngestAck:
    require_json(request.headers.get("content-type"))  # the token was checked by the gate
    body = await parse_json(IngestRequest, await request.body())
    return await asyncio.to_thread(metrics.ingest, rt, run_id, token, body)


@router.get("/runs/{ref}/metrics", response_model=MetricsView)
def run_metrics(
    ref: str,
    rt: RuntimeDep,
    user: ReadRun,
    key: Annotated[list[str] | None, Query()] = None,
    max_points: Annotated[int, Query(ge=2, le=100_000)] = metrics.DEFAULT_MAX_POINTS,
) -> MetricsView:
    return metrics.series(rt, user, ref, keys=key, max_points=max_points)


@router.get("/runs/{ref}/meta", response_model=RunMetaView)
def run_meta(ref: str, rt: RuntimeDep, user: ReadRun) -> RunMetaView:
    return metrics.meta(rt, user, ref)


@router.get("/progress", response_model=ProgressList)
def progress(
    rt: RuntimeDep, user: Reader, runs: Annotated[str, Query(max_length=20_000)] = ""
) -> ProgressList:
    """How far each named run (comma-separated ids) has logged its metrics."""
    return metrics.progress(rt, user, [r for r in runs.split(",") if r])
