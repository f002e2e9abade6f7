"""``GET /runs/{ref}/logs/stream``: a run's log as Server-Sent Events, resumable by event id.

The stream itself (which events, in what order, where it resumes) is
:class:`starforge.server.services.observability.logs.Follower`; this router only finds where to
start (by ``Last-Event-ID``, ``?from=`` or ``?tail=N``; ``?node=R`` follows one node alone) and
writes each typed event as SSE, with keep-alive comments every ``PING_S`` seconds while nothing else
goes out.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Query
from sse_starlette import EventSourceResponse, ServerSentEvent

from starforge.contract.api import INT32_MAX, SSE_STATUS
from starforge.server.api.authz import ReadRun
from starforge.server.api.deps import RuntimeDep
from starforge.server.services.observability import logs

router = APIRouter()

PING_S = 10.0
RETRY_MS = 1000


async def _sse(events: AsyncIterator[logs.StreamEvent]) -> AsyncIterator[ServerSentEvent]:
    async for e in events:
        retry = RETRY_MS if e.kind == SSE_STATUS else None
        data = e.payload.model_dump_json()
        yield ServerSentEvent(data=data, event=e.kind, id=e.id, retry=retry)


@router.get("/runs/{ref}/logs/stream")
async def stream_logs(
    ref: str,
    rt: RuntimeDep,
    user: ReadRun,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
    from_: Annotated[str | None, Query(alias="from")] = None,
    tail: Annotated[int | None, Query(ge=0)] = None,
    node: Annotated[int | None, Query(ge=0, le=INT32_MAX)] = None,
) -> EventSourceResponse:
    """Follow a run's log as Server-Sent Events until the run ends: every node's lines (node r >
    0's labelled ``[node r]``), or ``node``'s alone."""
    position = last_event_id or from_
    target, start = await logs.start_position(rt, user, ref, position, tail, node)
    follower = logs.Follower(rt, user, target.run_id, start.attempt, start.offsets, node=node)
    return EventSourceResponse(
        _sse(follower.events()),
        ping=PING_S,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
