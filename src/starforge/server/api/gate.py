"""The gate: every request is authenticated from its headers before its route reads a byte.

FastAPI reads and parses a route's declared body before it runs the route's dependencies, so a
rule checked in a dependency came too late for a body: an unauthenticated 66 MB JSON array was
parsed (1.7 GB of server memory, the event loop stalled for seconds) before its 401. The gate is
an ASGI middleware in front of the routes. It finds the route a request is for in the app's
authorization table (the rule each route declares with :mod:`.authz`) and, before the route
runs:

- checks the client-version header (400 for one no client sends, 426 for an old client: a
  user's call against the admin's ``min_client_version``, a runner's against the built-in one);
- for a user rule: authenticates the bearer token and checks the rule's role (401/403), in a
  worker thread (a database read; a request with no bearer token at all is refused without one),
  and leaves the caller in the request's scope, where the route's own rule dependency takes it
  instead of reading the database again;
- for the runner rule: runs the route's run-token check (``authz.runner(check)``: 401/403/404).

A refusal is answered from the headers alone. When the request has a body of more than a
keep-alive's drain (:data:`DRAIN_BYTES`), the answer closes the connection, so the server never
reads it; a small one is discarded by the HTTP server and the connection is kept. A public route,
a request for no route (404/405) or for a route that declares no rule passes as it is
(tests/server/test_authz_matrix.py keeps every API route declaring one).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool
from starlette.routing import compile_path
from starlette.types import ASGIApp, Receive, Scope, Send

from starforge.contract.api import CLIENT_VERSION_HEADER, MIN_CLIENT_VERSION, RUN_TOKEN_HEADER
from starforge.contract.errors import StarForgeError
from starforge.server.api import authz, bodies, deps, errors
from starforge.server.runtime import Runtime
from starforge.server.services.access import users

DRAIN_BYTES = 64 << 10  # a refused body up to this is read and dropped; beyond, the socket closes

_AUTHORIZATION = b"authorization"
_RUN_TOKEN = RUN_TOKEN_HEADER.lower().encode()
_CLIENT = CLIENT_VERSION_HEADER.lower().encode()
_READ = (_AUTHORIZATION, _RUN_TOKEN, _CLIENT, b"content-length", b"transfer-encoding")


@dataclass(frozen=True)
class Gate:
    """What a route requires of a request's headers."""

    user_rules: tuple[authz.Rule, ...]  # a bearer token whose user every rule lets in
    token_checks: tuple[authz.RunnerCheck, ...]  # the run token of the path's run_id

    @property
    def open(self) -> bool:
        return not self.user_rules and not self.token_checks


@dataclass(frozen=True)
class _Entry:
    methods: frozenset[str]
    pattern: re.Pattern[str]
    gate: Gate


def _api_routes(app: FastAPI) -> Iterator[tuple[set[str], str, Any]]:
    """(methods, path, dependant) of every API route, also inside included routers (FastAPI
    0.16x keeps an included router as one lazily expanded entry of ``app.routes``)."""
    for route in app.routes:
        if isinstance(route, APIRoute):
            yield route.methods, route.path, route.dependant
        elif hasattr(route, "effective_route_contexts"):
            for ctx in route.effective_route_contexts():
                yield ctx.methods, ctx.path_format, ctx.dependant


def gate_of(dependant: Any, path: str) -> Gate:
    """The requirements a route's dependencies declare (``authz_rule``, ``token_check``)."""
    rules: list[authz.Rule] = []
    checks: list[authz.RunnerCheck] = []
    stack = [dependant]
    while stack:
        dep = stack.pop()
        rule = getattr(dep.call, "authz_rule", None)
        if rule is not None and rule.who is authz.Who.USER:
            rules.append(rule)
        check = getattr(dep.call, "token_check", None)
        if check is not None:
            if "{run_id}" not in path:
                raise AssertionError(f"runner route {path} names no {{run_id}} to check")
            checks.append(check)
        stack.extend(dep.dependencies)
    return Gate(tuple(rules), tuple(checks))


def table(app: FastAPI) -> list[_Entry]:
    """Every API route's path pattern and gate, in routing order."""
    entries = []
    for methods, path, dependant in _api_routes(app):
        pattern, _, _ = compile_path(path)
        entries.append(_Entry(frozenset(methods), pattern, gate_of(dependant, path)))
    return entries


def _find(entries: list[_Entry], method: str, path: str) -> tuple[Gate, dict[str, str]] | None:
    if method == "HEAD":
        method = "GET"
    for entry in entries:
        if method in entry.methods and (match := entry.pattern.match(path)):
            return entry.gate, match.groupdict()
    return None


def _admit(gate: Gate, rt: Runtime, headers: dict[bytes, str], params: dict[str, str]) -> Any:
    """The caller the gate lets in (None for a runner), or the error that refuses the request."""
    for check in gate.token_checks:
        check(rt, params["run_id"], headers.get(_RUN_TOKEN))
    if not gate.user_rules:
        return None
    caller = users.authenticate_request(rt, headers.get(_AUTHORIZATION))
    for rule in gate.user_rules:
        authz.permit(rule, caller)
    return caller


def _has_big_body(headers: dict[bytes, str]) -> bool:
    if b"transfer-encoding" in headers:
        return True
    length = headers.get(b"content-length", "0")
    return not length.isdigit() or int(length) > DRAIN_BYTES


class Gatekeeper:
    """ASGI middleware: the request's route's rule, checked from its headers, before the route."""

    def __init__(self, app: ASGIApp, api: FastAPI) -> None:
        self.app = app
        self.api = api
        self._table: list[_Entry] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self._table is None:  # built once the app has all its routes
            self._table = table(self.api)
        found = _find(self._table, scope["method"], scope["path"])
        if found is None or found[0].open:
            await self.app(scope, receive, send)
            return
        gate, params = found
        headers = {
            name: value.decode("latin-1")
            for name, value in scope["headers"]
            if name
            in (_AUTHORIZATION, _RUN_TOKEN, _CLIENT, b"content-length", b"transfer-encoding")
        }
        rt: Runtime = self.api.state.runtime
        try:
            # A user's call is held to the admin's minimum client; a runner's to the built-in
            # one only, so the previous release's runners keep reporting through an upgrade.
            minimum = rt.settings.min_client_version if gate.user_rules else MIN_CLIENT_VERSION
            deps.check_client(headers.get(_CLIENT), minimum)
            if gate.user_rules:
                users.require_bearer(headers.get(_AUTHORIZATION))  # no token: no thread, no read
            caller = await run_in_threadpool(_admit, gate, rt, headers, params)
        except StarForgeError as err:
            await bodies.send_error(send, err, close=_has_big_body(headers))
            return
        except Exception as exc:  # outside the app's handlers: the database's outage is a 503
            unreachable = errors.database_failure(self.api, exc)
            if unreachable is None:
                raise
            await bodies.send_error(send, unreachable, close=_has_big_body(headers))
            return
        if caller is not None:
            scope.setdefault("state", {})[authz.CALLER_KEY] = caller
        await self.app(scope, receive, send)
