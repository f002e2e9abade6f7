"""The report SDK against the real control plane in this process (FastAPI's TestClient: real
routes, services and SQLite, no socket). Only the network is faked: :class:`Network` carries the
SDK's requests to the app and can be cut (connection refused) or held (a request that hangs).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from starforge.client.http import Client
from starforge.report.run import Run
from starforge.report.run import Settings as ReportSettings
from starforge.server.app import create_app
from starforge.server.runtime import Runtime
from starforge.server.services.access import users
from starforge.server.settings import Settings
from tests.server.conftest import (  # noqa: F401  (fixtures)
    _clean_env,
    database_url,
    databases,
    executor,
    settings,
)
from tests.server.factories import TOKENS, FakeExecutor, binding, running_run

BASE = "http://testserver"


class Network(httpx.BaseTransport):
    """Requests go to the in-process app unless the network is down (or a request is held)."""

    def __init__(self, app_client: TestClient) -> None:
        self.app_client = app_client
        self.up = True
        self.hold = threading.Event()
        self.hold.set()
        self.requests = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        self.hold.wait()
        if not self.up:
            raise httpx.ConnectError("connection refused", request=request)
        got = self.app_client.request(
            request.method,
            request.url.raw_path.decode(),
            content=request.read(),
            headers={k: v for k, v in request.headers.items() if k.lower() != "host"},
        )
        return httpx.Response(got.status_code, headers=got.headers, content=got.content)


@dataclass
class Server:
    rt: Runtime
    app_client: TestClient
    network: Network
    run_id: str
    token: str
    spool: Path

    def run(
        self, token: str | None = None, sync_steps: tuple[int, ...] = (), **options: object
    ) -> Run:
        """A reporting session of the job of ``run_id`` (its token unless another is given)."""
        tok = self.token if token is None else token
        job_env = ReportSettings(
            enabled=bool(tok),
            endpoint=BASE,
            run_id=self.run_id,
            token=tok,
            attempt=1,
            spool_dir=self.spool,
            sync_steps=sync_steps,
        )
        factory: Callable[[], Client] = lambda: Client(  # noqa: E731
            BASE, run_token=tok, transport=self.network, timeout=5.0
        )
        return Run(job_env, client_factory=factory, **options)  # type: ignore[arg-type]


@pytest.fixture
def server(
    settings: Settings,  # noqa: F811
    executor: FakeExecutor,  # noqa: F811
    tmp_path: Path,
) -> Iterator[Server]:
    app = create_app(
        settings.model_copy(update={"embedded": False}),
        executor=executor,
        run_loops=False,
    )
    with TestClient(app, base_url=BASE) as app_client:
        rt: Runtime = app.state.runtime
        rt.pick_port = lambda: 40000
        with rt.transaction() as session:
            for name, token in TOKENS.items():
                users.ensure_user(session, name, token)
        run_id = running_run(rt)
        token = binding(rt, run_id)["job_token"]
        yield Server(rt, app_client, Network(app_client), run_id, token, tmp_path / "spool")
