"""Every error leaves the server as ``{"code", "message", "hint", "details"}``.

StarForge errors keep their code and HTTP status; request validation errors become
``usage.invalid_spec`` (400, never FastAPI's 422: the client maps codes, and 422 is admission's
refusal) naming the field path; Starlette's HTTP errors (unknown route, wrong method) keep their
status, their headers (a 405 names the allowed methods in ``Allow``) and a stable code; a database
that does not answer becomes ``server.database_unreachable`` (503), logged once per outage
(``db/outage``), not once per request; anything unexpected becomes ``server.internal`` (500)
with no traceback on the wire (it goes to the server log). :func:`document_errors` writes this
into the OpenAPI of every route, so what the server answers is what its schema says
(schemathesis checks it: tests/security/test_schemathesis.py).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from starforge.contract.errors import InvalidSpec, NotFound, ServerError, StarForgeError, UsageError
from starforge.server.db import outage

log = logging.getLogger(__name__)


class ErrorBody(BaseModel):
    """What every error answer carries (``StarForgeError.to_wire``)."""

    code: str = Field(description="stable error code, e.g. usage.invalid_spec")
    message: str
    hint: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)


ERROR_SCHEMA_REF = "#/components/schemas/ErrorBody"

# Documented on every API route. "default" stands for the statuses only some routes answer
# (409, 413, 415, 422 admission refusals, 503...), all with the same body.
ERROR_STATUSES: dict[str, str] = {
    "400": "invalid request: a field, parameter or header failed validation",
    "401": "no or unknown credentials",
    "403": "the credentials do not allow this",
    "404": "no such run, blob, user or endpoint",
    "426": "the client is older than the oldest this server speaks to: upgrade it",
    "default": "any other error, in the same format",
}


def _error_response(status: str, description: str) -> dict[str, Any]:
    content: dict[str, Any] = {"application/json": {"schema": {"$ref": ERROR_SCHEMA_REF}}}
    if status == "400":
        # A request the HTTP layer cannot parse (a request line over its limit) is answered
        # by uvicorn in plain text before the app sees it.
        content["text/plain"] = {"schema": {"type": "string"}}
    return {"description": description, "content": content}


def document_errors(schema: dict[str, Any], prefix: str) -> dict[str, Any]:
    """Add the error answers to every operation under ``prefix`` of an OpenAPI ``schema`` and
    drop FastAPI's 422 validation body, which this server never sends (validation is a 400)."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components["ErrorBody"] = ErrorBody.model_json_schema()
    for path, item in schema.get("paths", {}).items():
        if not path.startswith(prefix):
            continue
        for operation in item.values():
            responses = operation.setdefault("responses", {})
            if "HTTPValidationError" in str(responses.get("422", "")):
                del responses["422"]
            for status, description in ERROR_STATUSES.items():
                responses.setdefault(status, _error_response(status, description))
    if "HTTPValidationError" not in str(schema.get("paths", {})):
        components.pop("HTTPValidationError", None)
        components.pop("ValidationError", None)
    return schema


def _wire(err: StarForgeError) -> JSONResponse:
    return JSONResponse(err.to_wire(), status_code=err.http_status)


def _field_path(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(p) for p in loc if p not in ("body",)]
    return ".".join(parts) or "(request)"


def validation_error(exc: RequestValidationError) -> InvalidSpec:
    problems = [f"{_field_path(e.get('loc', ()))}: {e.get('msg', 'invalid')}" for e in exc.errors()]
    shown = "; ".join(problems[:5]) + (
        f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
    )
    return InvalidSpec(
        f"invalid request: {shown}",
        hint="fix the named fields; an up-to-date client never sends this",
        details={
            "errors": [
                {"path": _field_path(e.get("loc", ())), "message": e.get("msg")}
                for e in exc.errors()
            ][:50]
        },
    )


def _allowed_methods(request: Request) -> str:
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches(request.scope)
        if match is not Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    return ", ".join(sorted(methods))


def database_failure(app: Any, exc: BaseException) -> StarForgeError | None:
    """The 503 for ``exc`` when it says the database is unreachable (noted on the database's
    watch, which logs the outage once), else None."""
    runtime = getattr(app.state, "runtime", None)
    if runtime is None or not outage.of(runtime.engine).failed(exc):
        return None
    return outage.unreachable_error()


def _internal(request: Request, exc: BaseException) -> JSONResponse:
    log.error("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
    return _wire(
        ServerError(
            "internal server error; the server log has the details",
            hint="try again; if it persists, report it with the server log",
        )
    )


def install(app: FastAPI) -> None:
    @app.exception_handler(StarForgeError)
    async def _starforge(_: Request, exc: StarForgeError) -> JSONResponse:
        return _wire(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _wire(validation_error(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            err: StarForgeError = NotFound(f"no such endpoint: {request.method} {request.url.path}")
        else:
            err = UsageError(str(exc.detail))
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            # RFC 9110: a 405 names what the resource allows, across all of its routes (Starlette
            # names only the first route's methods: GET and PUT of one path are two routes).
            headers["Allow"] = _allowed_methods(request)
        return JSONResponse(err.to_wire(), status_code=exc.status_code, headers=headers)

    # Its own handler, not only the catch-all below: Starlette re-raises what reaches that one
    # (after answering), and the HTTP server would log a traceback for every request.
    @app.exception_handler(DBAPIError)
    async def _database(request: Request, exc: DBAPIError) -> JSONResponse:
        unreachable = database_failure(request.app, exc)
        return _wire(unreachable) if unreachable is not None else _internal(request, exc)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        unreachable = database_failure(request.app, exc)
        return _wire(unreachable) if unreachable is not None else _internal(request, exc)
