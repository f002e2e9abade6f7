"""A stand-in for the Hugging Face hub's model-info API on 127.0.0.1, answering as the hub does.

The hub is the one service these tests cannot run locally. The stub serves what the gated-model
preflight asks (``GET /api/models/{repo}[/revision/{rev}]`` and ``/api/models/{repo}/auth-check``)
with the hub's status codes and error headers (``X-Error-Code: RepoNotFound`` / ``GatedRepo``),
so the real ``huggingface_hub`` client maps them to its own errors.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SHA = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class Hub:
    url: str
    public: set[str] = field(default_factory=set)
    gated: dict[str, set[str]] = field(default_factory=dict)  # repo -> tokens granted access
    requests: list[tuple[str, str]] = field(default_factory=list)  # (path, Authorization)


def _handler(hub: Hub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # quiet
            return

        def _answer(self, status: int, body: dict[str, object], **headers: str) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in headers.items():
                self.send_header(key.replace("_", "-"), value)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            auth = self.headers.get("Authorization", "")
            hub.requests.append((self.path, auth))
            path = self.path.split("?", 1)[0].removeprefix("/api/models/")
            check = path.endswith("/auth-check")
            repo = "/".join(path.removesuffix("/auth-check").split("/")[:2])
            token = auth.removeprefix("Bearer ")
            if repo not in hub.public and repo not in hub.gated:
                self._answer(
                    404,
                    {"error": "Repository not found"},
                    X_Error_Code="RepoNotFound",
                    X_Error_Message="Repository not found",
                )
            elif check and repo in hub.gated and token not in hub.gated[repo]:
                message = f"Access to model {repo} is restricted. You must have access to it."
                self._answer(
                    403, {"error": message}, X_Error_Code="GatedRepo", X_Error_Message=message
                )
            elif check:
                self._answer(200, {})
            else:
                gated = "manual" if repo in hub.gated else False
                body = {"id": repo, "modelId": repo, "sha": SHA, "private": False, "gated": gated}
                self._answer(200, body)

    return Handler


@contextmanager
def serve_hub(public: set[str], gated: dict[str, set[str]]) -> Iterator[Hub]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(Hub("", public, gated)))
    hub = Hub(f"http://127.0.0.1:{server.server_address[1]}", public, gated)
    server.RequestHandlerClass = _handler(hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
