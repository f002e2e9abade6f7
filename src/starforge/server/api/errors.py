"""Every error leaves the server as ``{"code", "message", "hint", "details"}``.

StarForge errors keep their code and HTTP status; request validation errors become
``usage.invalid_spec`` (400) naming the field path; Starlette's HTTP errors (unknown route, wrong
method) keep their status with a stable code; anything unexpected becomes ``server.internal``
(500) with no traceback on the wire (it goes to the server log).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from starforge.contract.errors import InvalidSpec, NotFound, ServerError, StarForgeError, UsageError

log = logging.getLogger(__name__)


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
        return JSONResponse(err.to_wire(), status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.error("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
        return _wire(
            ServerError(
                "internal server error; the server log has the details",
                hint="try again; if it persists, report it with the server log",
            )
        )
