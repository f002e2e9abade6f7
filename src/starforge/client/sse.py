"""Reading Server-Sent Events over httpx, reconnecting with ``Last-Event-ID`` after a drop.

:class:`EventStream` yields :class:`Event` s in order. When the connection drops (a network
blip, a server restart, a read timeout past the server's keep-alive comments), it reconnects
after the server's ``retry`` delay and sends the id of the last event it yielded, so a server
that resumes by id (as the log stream does) delivers every event exactly once. A stream the
server closes is also reconnected: the caller stops iterating when it has seen what it waited
for (the log stream's ``end`` event). After ``max_failures`` connection failures in a row it
raises :class:`ServerUnreachable`; an HTTP error answer raises the error class the server sent.
:meth:`Event.payload` reads a log-stream event as its typed model from ``contract/api.py``
(leniently: fields a newer server added are ignored).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from starforge.contract import api
from starforge.contract.errors import ServerError, ServerUnreachable, from_wire

DEFAULT_RETRY_S = 1.0
MAX_BACKOFF_S = 5.0


@dataclass(frozen=True)
class Event:
    event: str  # "message" when the server named none
    data: str
    id: str | None = None  # the stream's last event id after this event

    def json(self) -> Any:
        return json.loads(self.data)

    def payload(self) -> api.StreamPayload | None:
        """The log stream's typed payload; None for an event kind this version does not know."""
        return api.read_stream_event(self.event, self.data)


class Parser:
    """The SSE line protocol: fields until a blank line, which dispatches the event."""

    def __init__(self) -> None:
        self.last_id: str | None = None
        self.retry_ms: int | None = None
        self._event = ""
        self._data: list[str] = []

    def feed(self, line: str) -> Event | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None  # a comment: keep-alive
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self.last_id = value
        elif name == "retry" and value.isdigit():
            self.retry_ms = int(value)
        return None

    def _dispatch(self) -> Event | None:
        data, event = self._data, self._event
        self._data, self._event = [], ""
        if not data:
            return None
        return Event(event=event or "message", data="\n".join(data), id=self.last_id)


def parse(lines: Iterable[str]) -> Iterator[Event]:
    parser = Parser()
    for line in lines:
        event = parser.feed(line)
        if event is not None:
            yield event


class EventStream:
    """Iterate an SSE endpoint of ``http`` (an httpx client), resuming after every drop."""

    def __init__(
        self,
        http: httpx.Client,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        last_event_id: str | None = None,
        read_timeout_s: float = 30.0,
        max_failures: int = 20,
    ) -> None:
        self.http = http
        self.path = path
        self.params = {k: v for k, v in (params or {}).items() if v is not None}
        self.last_event_id = last_event_id
        self.read_timeout_s = read_timeout_s
        self.max_failures = max_failures
        self.retry_s = DEFAULT_RETRY_S
        self.reconnects = 0

    def __iter__(self) -> Iterator[Event]:
        failures = 0
        while True:
            try:
                for event in self._connect():
                    failures = 0
                    yield event
            except httpx.TransportError as exc:
                failures += 1
                if failures >= self.max_failures:
                    raise ServerUnreachable(
                        f"lost the event stream {self.path} and could not reconnect: {exc}",
                        hint="check that the server runs (`sf server status`), then follow again",
                    ) from exc
            self.reconnects += 1
            time.sleep(min(self.retry_s * max(failures, 1), MAX_BACKOFF_S))

    def _connect(self) -> Iterator[Event]:
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
        if self.last_event_id:
            headers["Last-Event-ID"] = self.last_event_id
        timeout = httpx.Timeout(10.0, read=self.read_timeout_s)
        with self.http.stream(
            "GET", self.path, params=self.params, headers=headers, timeout=timeout
        ) as response:
            if response.status_code >= 400:
                raise _error(response)
            parser = Parser()
            for line in response.iter_lines():
                event = parser.feed(line)
                if parser.retry_ms is not None:
                    self.retry_s = parser.retry_ms / 1000
                if event is not None:
                    self.last_event_id = event.id or self.last_event_id
                    yield event


def _error(response: httpx.Response) -> Exception:
    response.read()
    try:
        payload = response.json()
    except ValueError:
        return ServerError(f"HTTP {response.status_code}: {response.text[:200]}")
    if isinstance(payload, dict):
        return from_wire(payload, status=response.status_code)
    return ServerError(f"HTTP {response.status_code}: {payload!r}")
