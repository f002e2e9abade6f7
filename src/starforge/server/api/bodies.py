"""Request bodies: every one bounded before any route sees a byte of it.

:class:`BodyLimit` is a small ASGI middleware around the whole app. Each request gets the limit
of its route (:func:`limit_for`: blob uploads, metrics ingest and submissions have their own
configured limits, ``/blobs/missing`` shares the submissions' limit as it lists a package's
digests, every other route has the generic one). A ``Content-Length`` over the limit is
answered 413 at once, without reading the body; a body that streams past the limit (chunked, or
longer than it said) is cut there: the client gets the 413 and the route's read raises
:class:`~starforge.contract.errors.BodyTooLarge`, so an upload in progress is aborted and nothing
it wrote is kept. So no request can make the server hold more than its route's limit in memory.

No route reads a byte of a body before its request is authenticated: :mod:`.gate` checks every
route's rule from the headers first, so a request without a valid token costs the server its
headers only. A body of more than :data:`INLINE_PARSE_BYTES` (metrics ingest, and the routes that
carry a package's manifest: :func:`json_body`) is parsed in a worker thread (:func:`parse_json`),
never on the event loop.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from starforge.contract.api import API_PREFIX
from starforge.contract.errors import BodyTooLarge, StarForgeError, UnsupportedMediaType
from starforge.server.api.errors import validation_error
from starforge.server.settings import Settings

INLINE_PARSE_BYTES = 256 << 10  # parsed on the event loop below this (a thread hop costs more)
M = TypeVar("M", bound=BaseModel)

_BLOB = re.compile(rf"^{re.escape(API_PREFIX)}/blobs/[^/]+$")
_INGEST = re.compile(rf"^{re.escape(API_PREFIX)}/runs/[^/]+/ingest$")
_MANIFEST_SIZED = {
    f"{API_PREFIX}/jobs",
    f"{API_PREFIX}/blobs/missing",
    f"{API_PREFIX}/sweeps",
    f"{API_PREFIX}/datasets",
}
_BLOB_BATCH = f"{API_PREFIX}/blobs/batch"  # many small files: the submissions' limit


def limit_for(settings: Settings, method: str, path: str) -> int:
    """The most bytes a request to ``method path`` may send."""
    if method == "PUT" and _BLOB.match(path):
        return settings.max_blob_bytes
    if method == "POST" and _INGEST.match(path):
        return settings.max_ingest_bytes
    if method == "POST" and path.rstrip("/") == _BLOB_BATCH:
        return settings.max_submit_bytes
    if method == "POST" and path.rstrip("/") in _MANIFEST_SIZED:
        return settings.max_submit_bytes  # both carry one entry per file of a package
    return settings.max_body_bytes


def too_large(limit: int, declared: int | None = None) -> BodyTooLarge:
    said = f" ({declared} bytes)" if declared is not None else ""
    return BodyTooLarge(
        f"the request body{said} is larger than this endpoint's limit of {limit} bytes",
        hint="send less per request; a server admin can raise the limit in server.yaml",
        details={"limit": limit, **({"declared": declared} if declared is not None else {})},
    )


def require_json(content_type: str | None) -> None:
    """415 unless the body is declared as JSON (a browser's no-preflight text/plain is not)."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media != "application/json" and not (
        media.startswith("application/") and media.endswith("+json")
    ):
        raise UnsupportedMediaType(
            f"the body must be sent as application/json, not {media or 'no Content-Type'}",
            hint="set Content-Type: application/json",
            details={"content_type": media},
        )


async def parse_json(model: type[M], raw: bytes) -> M:
    """``raw`` as ``model``; a body of more than :data:`INLINE_PARSE_BYTES` in a worker thread
    (:func:`_parse_large`), so it does not stall the event loop. Invalid: 400 naming the fields,
    as FastAPI's own bodies."""
    try:
        if len(raw) > INLINE_PARSE_BYTES:
            return await run_in_threadpool(_parse_large, model, raw)
        return model.model_validate_json(raw)  # one pass, no intermediate Python objects
    except ValidationError as exc:
        raise validation_error(RequestValidationError(exc.errors())) from None


def _parse_large(model: type[M], raw: bytes) -> M:
    # In two steps, though one pass of pydantic's JSON parser is faster: that pass holds the GIL
    # from its first byte to its last (16 MB: 0.6-1.6 s of a stalled event loop, measured),
    # where the stdlib's decoder holds it for the decoding only (0.2 s) and validating Python
    # objects lets the event loop in between. A body that is not JSON is left to pydantic, whose
    # error names what is wrong.
    try:
        data = json.loads(raw)
    except ValueError:
        return model.model_validate_json(raw)
    return model.model_validate(data)


# The models of the routes that read their body through :func:`json_body`: the served OpenAPI
# documents them as the routes' bodies (``app.install_openapi``).
PARSED_BODIES: dict[str, type[BaseModel]] = {}


def json_body(model: type[M]) -> Any:
    """A route's JSON body as ``model`` through :func:`parse_json`: a large one (a package's
    manifest lists every file) is parsed in a worker thread, where FastAPI's own body parameter
    would decode and validate it on the event loop, stalling every other request meanwhile. Use
    as ``body: Annotated[Model, json_body(Model)]`` with ``openapi_extra=body_doc(Model)``."""

    async def read(request: Request) -> M:
        require_json(request.headers.get("content-type"))
        return await parse_json(model, await request.body())

    PARSED_BODIES[model.__name__] = model
    return Depends(read)


def body_doc(model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAPI ``requestBody`` of a route whose body :func:`json_body` reads."""
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def send_error(send: Send, err: StarForgeError, *, close: bool = True) -> None:
    """Answer ``err`` in the wire format from outside the app's error handlers (a middleware);
    ``close``: the connection is closed after it, so an unread body is never read."""
    body = json.dumps(err.to_wire()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": err.http_status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """ASGI middleware: a request body beyond its route's limit is a 413, read no further."""

    def __init__(self, app: ASGIApp, limit: Callable[[str, str], int]) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit(scope["method"], scope["path"])
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await send_error(send, too_large(limit, declared))
            return
        seen = 0
        started = refused = False

        async def limited_receive() -> Message:
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    err = too_large(limit)
                    if not started and not refused:
                        refused = True
                        await send_error(send, err)
                    raise err
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if refused:
                return  # the 413 went out already; whatever the route answered after is dropped
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except BodyTooLarge:
            if not refused:
                raise
