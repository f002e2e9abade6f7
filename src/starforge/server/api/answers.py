"""Every answer in the words of the client that asked (docs/releases.md): a middleware that
names the request's client version (``X-StarForge-Client``; none: this release) as the reader of
whatever the request's route writes, its JSON and its log stream's events alike
(:mod:`starforge.contract.answering` gives an older client the values it knows)."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from starforge.contract import answering
from starforge.contract.api import CLIENT_VERSION_HEADER

_CLIENT = CLIENT_VERSION_HEADER.lower().encode()


class ForClient:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        client = next((v.decode("latin-1") for k, v in scope["headers"] if k == _CLIENT), None)
        with answering.reader(client):
            await self.app(scope, receive, send)
