"""Typed calls to the control plane, one method per endpoint.

Error bodies come back as the same :mod:`starforge.contract.errors` class the server raised; a
connection failure is :class:`ServerUnreachable` naming the URL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from starforge import __version__
from starforge.contract import api
from starforge.contract.errors import ServerError, ServerUnreachable, from_wire

M = TypeVar("M", bound=BaseModel)
_UPLOAD_CHUNK = 1 << 20


class Client:
    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        run_token: str | None = None,
        timeout: float = 30.0,
    ) -> None:
        headers = {api.CLIENT_VERSION_HEADER: __version__}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if run_token:
            headers[api.RUN_TOKEN_HEADER] = run_token
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.base_url + api.API_PREFIX,
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=5.0),
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- plumbing -----------------------------------------------------------------------------

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ServerUnreachable(
                f"cannot reach the StarForge server at {self.base_url}: {exc}",
                hint="check that it runs (`sf server status`) or set STARFORGE_SERVER",
            ) from exc
        if response.status_code >= 400:
            try:
                payload = response.json()
            except ValueError:
                raise ServerError(
                    f"HTTP {response.status_code} from {self.base_url}{path}: {response.text[:200]}"
                ) from None
            if isinstance(payload, dict):
                raise from_wire(payload, status=response.status_code)
            raise ServerError(f"HTTP {response.status_code}: {payload!r}")
        return response

    def _get(self, path: str, model: type[M], **params: Any) -> M:
        clean = {k: v for k, v in params.items() if v is not None}
        return model.model_validate(self._send("GET", path, params=clean).json())

    def _post(self, path: str, model: type[M], body: BaseModel | None = None) -> M:
        content = body.model_dump(mode="json") if body is not None else None
        return model.model_validate(self._send("POST", path, json=content).json())

    # ---- endpoints ----------------------------------------------------------------------------

    def health(self) -> bool:
        return bool(self._send("GET", "/health").json().get("ok"))

    def info(self) -> api.ServerInfo:
        return self._get("/info", api.ServerInfo)

    def whoami(self) -> api.WhoAmI:
        return self._get("/whoami", api.WhoAmI)

    def profiles(self) -> api.ProfilesResponse:
        return self._get("/profiles", api.ProfilesResponse)

    def missing_blobs(self, digests: list[str]) -> list[str]:
        body = api.MissingBlobsRequest(digests=digests)
        return self._post("/blobs/missing", api.MissingBlobsResponse, body).missing

    def upload_blob(
        self, digest: str, path: Path, progress: Callable[[int], None] | None = None
    ) -> None:
        def chunks() -> Iterator[bytes]:
            with path.open("rb") as fh:
                while chunk := fh.read(_UPLOAD_CHUNK):
                    yield chunk
                    if progress:
                        progress(len(chunk))

        self._send(
            "PUT",
            f"/blobs/{digest}",
            content=chunks(),
            headers={"Content-Type": "application/octet-stream"},
            timeout=httpx.Timeout(300.0, connect=5.0),
        )

    def submit(self, request: api.SubmitRequest) -> api.SubmitResponse:
        return self._post("/jobs", api.SubmitResponse, request)

    def list_runs(self, *, limit: int = 50, status: str | None = None) -> api.RunList:
        return self._get("/runs", api.RunList, limit=limit, status=status)

    def get_run(self, ref: str) -> api.RunView:
        return self._get(f"/runs/{ref}", api.RunView)

    def stop(self, run_id: str) -> api.ActionResult:
        return self._post(f"/runs/{run_id}/stop", api.ActionResult)

    def logs(
        self, run_id: str, *, attempt: int | None = None, offset: int = 0, wait: float = 0
    ) -> api.LogChunk:
        response = self._send(
            "GET",
            f"/runs/{run_id}/logs",
            params={
                k: v
                for k, v in {"attempt": attempt, "offset": offset, "wait": wait}.items()
                if v is not None
            },
            timeout=httpx.Timeout(wait + 30.0, connect=5.0),
        )
        return api.LogChunk.model_validate(response.json())

    def lifecycle(self, run_id: str, event: api.LifecycleEvent) -> None:
        self._send("POST", f"/runs/{run_id}/lifecycle", json=event.model_dump(mode="json"))
