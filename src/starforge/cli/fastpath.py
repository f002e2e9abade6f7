"""``sf job logs [RUN] [-n N] --no-follow`` without typer, pydantic, httpx or rich.

Printing the end of a finished run's log is the read users repeat most, and the server answers it
in milliseconds (it reads the tail from the end of the file); the full command spent most of a
second importing the CLI framework, the models and the HTTP client. So :func:`starforge.cli.main`
tries this module first, before importing anything else, and it handles exactly one strict
grammar, with the standard library only:

    sf job logs [RUN] [-n N | --tail N | -nN | --tail=N] [--node R | --node=R] --no-follow
                                                (N >= 1; R >= 0; RUN: [A-Za-z0-9._-])

It finds the server with :func:`starforge.client.config.find_server` (the normal path's own
order: environment, ``sf login``, the embedded server), sends the same requests as the full
command (``GET /runs/RUN``, or ``GET /runs?limit=1`` first without RUN, then the JSON log
endpoint through :func:`starforge.cli.logtail.attempt_text`: node 0's, then each other node's
of a multi-node attempt) with the same client version header and bearer token, and returns the
same text (every node's last lines, labelled, or ``--node R``'s alone). The
embedded server is not health-checked first, as the full command does: a server that does not
answer is a failed connection, hence a fallback, and the full command checks and starts it.

It never reports an error itself: on anything else (another command or option, ``--json``,
``--debug``, ``-n 0``, an answer other than 200 with the expected JSON, a connection that fails,
an embedded server that is not running and the normal path would start, a run with no attempt
yet, a proxy from the environment that httpx would use) it answers None and ``sf``
runs the full command, which sends its requests again and prints the one error message, hint and
exit code that command owns. Nothing is printed before every request has succeeded, so a
fallback never repeats output. The price: a server that hangs is waited for twice (the read
timeout here, then the full command's), before the full command's error.
"""

from __future__ import annotations

import json
import os
import re
import socket
import urllib.parse

from starforge import __version__
from starforge.cli.logtail import attempt_text
from starforge.client import config
from starforge.contract.wire import API_PREFIX, CLIENT_VERSION_HEADER

TYPE_CHECKING = False  # typing's own costs an import this path does without
if TYPE_CHECKING:
    import ssl
    from typing import Any, BinaryIO

TIMEOUT_S = 30.0  # the full client's read timeout
_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_COUNT = re.compile(r"[1-9][0-9]{0,8}")
_RANK = re.compile(r"0|[1-9][0-9]{0,8}")
_LINE_MAX = 65536
# httpx sends through a proxy these name (trust_env); this module does not imitate proxies.
_PROXY_ENV = {"http_proxy", "https_proxy", "all_proxy"}


class Fallback(Exception):
    """Anything the fast path does not handle: the full command runs instead."""


def job_logs(argv: list[str]) -> str | None:
    """What ``sf ARGV`` prints on stdout when it is a fast-path ``sf job logs``; else None."""
    parsed = parse(argv)
    if parsed is None or any(k.lower() in _PROXY_ENV for k in os.environ):
        return None
    ref, lines, node = parsed
    config.use_ca_file(None)  # its grammar has no --ca-file (an earlier main() may have set one)
    server = config.find_server()
    if server is None:  # nothing running: the full command starts the embedded server
        return None
    try:
        with Wire(server.url, server.token, server.ca_file) as wire:
            return tail_text(wire, ref, lines, node)
    except (Fallback, OSError, ValueError, KeyError, TypeError):
        return None


def parse(argv: list[str]) -> tuple[str | None, int, int | None] | None:
    """(RUN or None for the latest run, N, R or None for every node) for the grammar in the
    module's docstring; else None."""
    if argv[:2] != ["job", "logs"]:
        return None
    ref: str | None = None
    node: int | None = None
    lines, no_follow, rest = 2000, False, list(argv[2:])  # 2000: the command's default
    while rest:
        token = rest.pop(0)
        value: str | None = None
        if token == "--no-follow" and not no_follow:
            no_follow = True
        elif token == "--node" or token.startswith("--node="):
            rank = rest.pop(0) if token == "--node" and rest else token.removeprefix("--node=")
            if node is not None or not _RANK.fullmatch(rank):
                return None
            node = int(rank)
        elif token in ("-n", "--tail") and rest:
            value = rest.pop(0)
        elif token.startswith("--tail="):
            value = token.removeprefix("--tail=")
        elif token.startswith("-n") and len(token) > 2:
            value = token[2:]
        elif ref is None and _REF.fullmatch(token):
            ref = token
        else:
            return None
        if value is not None:
            if not _COUNT.fullmatch(value):
                return None
            lines = int(value)
    return (ref, lines, node) if no_follow else None


def tail_text(wire: Wire, ref: str | None, lines: int, node: int | None = None) -> str:
    """The last ``lines`` lines of the run's current attempt (of each node, or of ``node``), as
    the full command prints them."""
    if ref is None:
        runs = wire.get_json("/runs", {"limit": 1})["runs"]
        if not runs:
            raise Fallback("no runs: the full command says so")
        ref = _checked_ref(runs[0]["run_id"])
    view = wire.get_json(f"/runs/{ref}")
    attempts = view["attempts"]
    if not isinstance(attempts, list) or not attempts:
        raise Fallback("no attempt yet: the full command says why")
    run_id, number = _checked_ref(view["run_id"]), attempts[-1]["number"]
    if type(number) is not int:
        raise Fallback(f"unexpected attempt number {number!r}")
    return attempt_text(wire, run_id, number, tail=lines, node=node)


def _checked_ref(value: object) -> str:
    if not isinstance(value, str) or not _REF.fullmatch(value):
        raise Fallback(f"unexpected run id {value!r}")
    return value


class Chunk:
    """One answer of the log endpoint: the fields :func:`read_attempt` reads."""

    __slots__ = ("data", "final", "node", "nodes", "offset")

    def __init__(self, body: dict[str, Any]) -> None:
        self.data, self.offset, self.final = body["data"], body["offset"], body["final"]
        # A server from before multi-node logs sends neither: node 0's log of a one-node attempt.
        self.node, self.nodes = body.get("node", 0), body.get("nodes", 1)
        if not (isinstance(self.data, str) and type(self.offset) is int):
            raise Fallback("unexpected log chunk")
        if not isinstance(self.final, bool):
            raise Fallback("unexpected log chunk")
        if type(self.node) is not int or type(self.nodes) is not int or self.nodes < 1:
            raise Fallback("unexpected log chunk")


class Wire:
    """GET requests to one server over one kept-alive HTTP/1.1 connection, as the full client
    sends them (its version header, its bearer token, its query encoding).

    A plain socket, not ``http.client``: that module imports ``email`` and ``ssl`` (a third of
    this path's import time) to parse what this class needs only a strict subset of: a status
    line, headers, a body of ``Content-Length`` bytes. Anything else (another status, a chunked
    or compressed body, a closed connection) is :class:`Fallback`.
    """

    def __init__(self, url: str, token: str | None, ca_file: str | None = None) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.username:
            raise Fallback(f"unexpected server URL {url!r}")
        self.tls = parts.scheme == "https"
        self.ca_file = ca_file
        self.host, self.port = parts.hostname, parts.port or (443 if self.tls else 80)
        self.prefix = parts.path.rstrip("/") + API_PREFIX
        headers = {"Host": parts.netloc, "Accept": "*/*", CLIENT_VERSION_HEADER: __version__}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if any(c in value for value in headers.values() for c in "\r\n"):
            raise Fallback("a header value with a line break")  # httpx refuses it too
        self.head = "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode("latin-1")
        self.sock: socket.socket | None = None
        self.reader: BinaryIO | None = None

    def __enter__(self) -> Wire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
        if self.sock is not None:
            self.sock.close()
        self.sock = self.reader = None

    def get_json(self, path: str, query: dict[str, int] | None = None) -> dict[str, Any]:
        """The JSON object a 200 answer to ``GET path?query`` carries; else Fallback."""
        target = self.prefix + path
        if query:  # ints only: what urlencode and httpx write for them
            target += "?" + "&".join(f"{k}={int(v)}" for k, v in query.items())
        if self.sock is None:
            self.sock = socket.create_connection((self.host, self.port), timeout=TIMEOUT_S)
            if self.tls:
                context = _tls_context(self.ca_file)
                self.sock = context.wrap_socket(self.sock, server_hostname=self.host)
            self.reader = self.sock.makefile("rb")
        assert self.reader is not None
        self.sock.sendall(f"GET {target} HTTP/1.1\r\n".encode("ascii") + self.head + b"\r\n")
        status, headers, body = _response(self.reader)
        if headers.get("connection", "").lower() == "close":
            self.close()
        if status != 200 or headers.get("content-encoding", "identity") != "identity":
            raise Fallback(f"HTTP {status} for {path}")
        data = json.loads(body)
        if not isinstance(data, dict):
            raise Fallback(f"unexpected answer for {path}")
        return data

    def logs(
        self,
        run_id: str,
        *,
        attempt: int | None = None,
        offset: int = 0,
        tail: int | None = None,
        node: int | None = None,
    ) -> Chunk:
        """The full client's ``logs()``: the same query, ``wait=0`` included; a server that
        answers another node than asked for (one from before multi-node logs) is a fallback,
        and the full command says so."""
        params = {"attempt": attempt, "offset": offset, "wait": 0, "tail": tail, "node": node}
        query = {k: v for k, v in params.items() if v is not None}
        chunk = Chunk(self.get_json(f"/runs/{run_id}/logs", query))
        if node is not None and chunk.node != node:
            raise Fallback(f"asked for node {node}'s log, got node {chunk.node}'s")
        return chunk


def _response(reader: BinaryIO) -> tuple[int, dict[str, str], bytes]:
    """(status, headers by lower-case name, body) of one HTTP/1.x answer with a Content-Length."""
    version, _, rest = reader.readline(_LINE_MAX).decode("latin-1").partition(" ")
    if not version.startswith("HTTP/1.") or not rest[:3].isdigit():
        raise Fallback(f"not an HTTP/1.x answer: {version!r}")
    headers: dict[str, str] = {}
    while (line := reader.readline(_LINE_MAX)) not in (b"\r\n", b"\n"):
        name, colon, value = line.decode("latin-1").partition(":")
        if not colon or not line.endswith(b"\n"):
            raise Fallback("a malformed or cut header")
        headers[name.strip().lower()] = value.strip()
    if "transfer-encoding" in headers or not headers.get("content-length", "").isdigit():
        raise Fallback("an answer without a plain Content-Length (chunked?)")
    length = int(headers["content-length"])
    body = reader.read(length)
    if len(body) != length:
        raise Fallback("the connection closed inside the answer")
    return int(rest[:3]), headers, body


def _tls_context(ca_file: str | None) -> ssl.SSLContext:
    """The CAs the full client trusts (:mod:`starforge.client.trust`): the server's CA file when
    one is chosen, else httpx's defaults (``SSL_CERT_FILE``, ``SSL_CERT_DIR``, certifi's
    bundle; not the system's)."""
    from starforge.client import trust

    return trust.context(ca_file)
