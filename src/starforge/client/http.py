"""Typed calls to the control plane, one method per endpoint.

Every response is read leniently (``Model.read``): fields a newer server added, at any depth, are
ignored, so this client keeps working against the next server version. Error bodies come back as
the same :mod:`starforge.contract.errors` class the server raised; a connection failure is
:class:`ServerUnreachable` naming the URL, and a certificate no trusted CA signed is
:class:`UntrustedCertificate` naming the setting that gives the CA (:mod:`starforge.client.trust`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
from pydantic import BaseModel

from starforge import __version__
from starforge.client import trust
from starforge.client.sse import EventStream
from starforge.contract import api, blobbatch
from starforge.contract.base import Contract
from starforge.contract.diffs import RunDiff
from starforge.contract.errors import (
    ServerError,
    ServerUnreachable,
    UntrustedCertificate,
    UsageError,
    from_wire,
)

# Users, images and sweeps are imported by the methods that need them: `sweeps` alone pulls in
# params, config and yaml, which `sf job logs` and `sf submit` never use.
if TYPE_CHECKING:
    from starforge.contract import auth, images, reruns, sweeps

M = TypeVar("M", bound=Contract)
_UPLOAD_CHUNK = 1 << 20


class Client:
    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        run_token: str | None = None,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,  # for tests: an in-process server
        ca_file: str | None = None,
        ca_pem: str = "",
        ca_setting: str = trust.CLI_SETTING,
    ) -> None:
        """``ca_file``/``ca_pem``: the CA to trust instead of the default bundle (for https);
        ``ca_setting``: where the caller's user sets it, named when a certificate is refused."""
        headers = {api.CLIENT_VERSION_HEADER: __version__}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if run_token:
            headers[api.RUN_TOKEN_HEADER] = run_token
        self.base_url = base_url.rstrip("/")
        self.ca_setting = ca_setting
        self._http = httpx.Client(
            base_url=self.base_url + api.API_PREFIX,
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=5.0),
            transport=transport,
            # Loading the CA bundle costs ~50 ms per client; a plain-http server (the embedded
            # one on 127.0.0.1) never uses it, and redirects are not followed to anywhere else.
            verify=self._trust(ca_file, ca_pem),
        )

    def _trust(self, ca_file: str | None, ca_pem: str) -> Any:
        if self.base_url.startswith("http://"):
            return False
        if not (ca_file or ca_pem):
            return True  # httpx's defaults, loaded by httpx
        try:
            return trust.context(ca_file, ca_pem)
        except OSError as exc:  # ssl.SSLError too: a file with no certificate in it
            what = f"the CA file {ca_file}" if ca_file else "the CA the server handed down"
            raise UsageError(
                f"cannot use {what} ({self.ca_setting}): {exc}",
                hint="give the PEM file of the CA that signed the server's certificate",
            ) from None

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
            refused = trust.verify_failure(exc)
            if refused is not None:
                raise UntrustedCertificate(
                    f"the server at {self.base_url} has a certificate this client does not "
                    f"trust ({refused}): give the CA that signed it with {self.ca_setting}",
                    hint=trust.HINTS.get(self.ca_setting, ""),
                ) from exc
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
                err = from_wire(payload, status=response.status_code)
                if err.code == "not_found" and err.message.startswith("no such endpoint"):
                    # A route this client knows and the server does not: an older server.
                    err.hint = err.hint or (
                        f"the server may be older than this client ({__version__}): "
                        "`sf server status` shows its version (docs/releases.md)"
                    )
                raise err
            raise ServerError(f"HTTP {response.status_code}: {payload!r}")
        return response

    def _get(self, path: str, model: type[M], **params: Any) -> M:
        clean = {k: v for k, v in params.items() if v is not None}
        return model.read(self._send("GET", path, params=clean).content)

    def _post(self, path: str, model: type[M], body: BaseModel | None = None) -> M:
        if body is None:
            return model.read(self._send("POST", path).content)
        # Serialised by pydantic-core in one pass (a manifest has thousands of entries).
        content = body.model_dump_json().encode()
        headers = {"Content-Type": "application/json"}
        return model.read(self._send("POST", path, content=content, headers=headers).content)

    # ---- endpoints ----------------------------------------------------------------------------

    def health(self, *, timeout: float | None = None) -> bool:
        """Whether the server says it is up; ``timeout``: this request's read timeout."""
        wait = {} if timeout is None else {"timeout": httpx.Timeout(timeout, connect=5.0)}
        return api.Health.read(self._send("GET", "/health", **wait).content).ok

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

    def upload_blob_batch(self, body: bytes) -> None:
        """Many small blobs in one request (framed by :mod:`starforge.contract.blobbatch`)."""
        self._send(
            "POST",
            "/blobs/batch",
            content=body,
            headers={"Content-Type": blobbatch.MEDIA_TYPE},
            timeout=httpx.Timeout(300.0, connect=5.0),
        )

    def submit(self, request: api.SubmitRequest) -> api.SubmitResponse:
        return self._post("/jobs", api.SubmitResponse, request)

    def list_runs(
        self,
        *,
        limit: int = 50,
        status: str | None = None,
        hide_steps: bool = False,
        before: str | None = None,
        project: str | None = None,
    ) -> api.RunList:
        """A page of runs, newest first; ``before``: the previous page's ``next_before``."""
        # Each parameter only when asked: the query stays what older servers knew.
        flags = {"hide_steps": "true"} if hide_steps else {}
        return self._get(
            "/runs",
            api.RunList,
            limit=limit,
            status=status,
            before=before,
            project=project,
            **flags,
        )

    def export_run(self, ref: str, body: api.ExportRequest) -> api.SubmitResponse:
        return self._post(f"/runs/{ref}/export", api.SubmitResponse, body)

    def get_run(self, ref: str) -> api.RunView:
        return self._get(f"/runs/{ref}", api.RunView)

    def stop(self, run_id: str) -> api.ActionResult:
        return self._post(f"/runs/{run_id}/stop", api.ActionResult)

    def pause(self, run_id: str) -> api.ActionResult:
        return self._post(f"/runs/{run_id}/pause", api.ActionResult)

    def resume(self, run_id: str) -> api.ActionResult:
        return self._post(f"/runs/{run_id}/resume", api.ActionResult)

    def retry(self, run_id: str) -> api.ActionResult:
        return self._post(f"/runs/{run_id}/retry", api.ActionResult)

    def rerun(self, ref: str, request: reruns.RerunRequest) -> reruns.RerunResponse:
        from starforge.contract import reruns

        return self._post(f"/runs/{ref}/rerun", reruns.RerunResponse, request)

    def logs(
        self,
        run_id: str,
        *,
        attempt: int | None = None,
        offset: int = 0,
        wait: float = 0,
        tail: int | None = None,
        node: int | None = None,
    ) -> api.LogChunk:
        """A chunk of one node's log of an attempt (node 0's unless ``node``) from ``offset``,
        or (``tail``) from its last lines; the chunk says how many nodes the attempt has."""
        params = {"attempt": attempt, "offset": offset, "wait": wait, "tail": tail, "node": node}
        response = self._send(
            "GET",
            f"/runs/{run_id}/logs",
            params={k: v for k, v in params.items() if v is not None},
            timeout=httpx.Timeout(wait + 30.0, connect=5.0),
        )
        chunk = api.LogChunk.read(response.content)
        if node is not None and chunk.node != node:  # a server from before multi-node logs
            raise UsageError(
                f"the server at {self.base_url} cannot read node {node}'s log (it answered with "
                f"node {chunk.node}'s)",
                hint="upgrade the server, or omit --node to read node 0's log",
            )
        return chunk

    def lifecycle(self, run_id: str, event: api.LifecycleEvent) -> bool:
        """Report a runner event; False when the server ignored it (the attempt is over)."""
        response = self._send(
            "POST", f"/runs/{run_id}/lifecycle", json=event.model_dump(mode="json")
        )
        return api.LifecycleAck.read(response.content).accepted

    def lifecycle_batch(self, run_id: str, batch: api.LifecycleBatch) -> list[bool]:
        """Report several runner events in one request; for each, whether it was accepted."""
        response = self._send(
            "POST", f"/runs/{run_id}/lifecycle/batch", json=batch.model_dump(mode="json")
        )
        return [ack.accepted for ack in api.LifecycleBatchAck.read(response.content).acks]

    # ---- observability ------------------------------------------------------------------------

    def ingest(self, run_id: str, body: api.IngestRequest | bytes) -> api.IngestAck:
        """Send a batch of metrics/hyperparameters/metadata (needs the run token). A high-volume
        sender may pass the JSON of an IngestRequest it built itself; the server validates it."""
        content = body if isinstance(body, bytes) else body.model_dump_json(exclude_none=True)
        response = self._send(
            "POST",
            f"/runs/{run_id}/ingest",
            content=content,
            headers={"Content-Type": "application/json"},
        )
        return api.IngestAck.read(response.content)

    def metrics(
        self, ref: str, *, keys: list[str] | None = None, max_points: int | None = None
    ) -> api.MetricsView:
        return self._get(f"/runs/{ref}/metrics", api.MetricsView, key=keys, max_points=max_points)

    def run_meta(self, ref: str) -> api.RunMetaView:
        return self._get(f"/runs/{ref}/meta", api.RunMetaView)

    def progress(self, run_ids: list[str]) -> api.ProgressList:
        return self._get("/progress", api.ProgressList, runs=",".join(run_ids))

    def artifacts(self, ref: str) -> api.ArtifactList:
        return self._get(f"/runs/{ref}/artifacts", api.ArtifactList)

    def runs_diff(self, refs: list[str]) -> RunDiff:
        """What differs between 2 to 8 runs (ids or prefixes), in the order given."""
        return self._get("/runs-diff", RunDiff, run=refs)

    def stream_logs(
        self,
        run_id: str,
        *,
        tail: int | None = None,
        start: str | None = None,
        node: int | None = None,
    ) -> EventStream:
        """The run's log as Server-Sent Events from ``start`` (an event id: ``ATTEMPT:OFFSET``,
        one offset per node), or each node's last ``tail`` lines, or its beginning: every node's
        lines (node r > 0's labelled ``[node r]``), or ``node``'s alone. It reconnects by itself
        after a drop and resumes after the last event it yielded."""
        params = {"tail": tail, "node": node}
        path = f"/runs/{run_id}/logs/stream"
        return EventStream(self._http, path, params=params, last_event_id=start)

    def console_url(self, run_id: str | None = None, *, sign_in: bool = False) -> str:
        """The web console's page of a run (or its home); ``sign_in`` adds a fresh console token
        (it only reads and expires within hours, never the user's own) in the URL fragment,
        which browsers never send to the server."""
        route = f"/runs/{run_id}" if run_id else "/"
        query = f"?token={self.console_token().token}" if sign_in else ""
        return f"{self.base_url}/#{route}{query}"

    def console_token(self) -> auth.TokenCreated:
        from starforge.contract import auth

        return self._post("/tokens/console", auth.TokenCreated)

    # ---- resources ----------------------------------------------------------------------------

    def cluster_status(self) -> api.ClusterStatus:
        return self._get("/cluster/status", api.ClusterStatus)

    def my_usage(self) -> api.MyUsage:
        return self._get("/usage/mine", api.MyUsage)

    def quotas(self) -> api.QuotaList:
        return self._get("/admin/quotas", api.QuotaList)

    def quota(self, user: str) -> api.UserQuota:
        return self._get(f"/admin/quotas/{user}", api.UserQuota)

    def set_quota(self, user: str, update: api.QuotaUpdate) -> api.UserQuota:
        """Only the fields set on ``update`` are sent: the others keep their value."""
        body = update.model_dump(mode="json", exclude_unset=True)
        return api.UserQuota.read(self._send("PUT", f"/admin/quotas/{user}", json=body).content)

    # ---- images (admins) -----------------------------------------------------------------------

    def image_settings(self) -> images.ImageAdmin:
        from starforge.contract import images

        return self._get("/admin/images", images.ImageAdmin)

    def set_image_default(self, framework: str, ref: str) -> images.ImageAdmin:
        from starforge.contract import images

        body = images.ImageDefaultUpdate(ref=ref).model_dump(mode="json")
        sent = self._send("PUT", f"/admin/images/defaults/{framework}", json=body)
        return images.ImageAdmin.read(sent.content)

    def update_registry(self, entry: str, *, allowed: bool) -> images.ImageAdmin:
        from starforge.contract import images

        body = images.RegistryUpdate(entry=entry, allowed=allowed).model_dump(mode="json")
        return images.ImageAdmin.read(self._send("PUT", "/admin/registries", json=body).content)

    # ---- users and tokens ---------------------------------------------------------------------

    def users(self) -> auth.UserList:
        from starforge.contract import auth

        return self._get("/users", auth.UserList)

    def add_user(self, name: str, role: str, unix_user: str | None = None) -> auth.UserCreated:
        from starforge.contract import auth

        body = auth.UserCreate(name=name, role=auth.Role(role), unix_user=unix_user)
        return self._post("/users", auth.UserCreated, body)

    def set_unix_user(self, name: str, unix_user: str | None) -> auth.UserView:
        from starforge.contract import auth

        body = auth.UnixUserUpdate(unix_user=unix_user).model_dump(mode="json")
        return auth.UserView.read(self._send("PUT", f"/users/{name}/unix", json=body).content)

    def set_role(self, name: str, role: str) -> auth.UserView:
        from starforge.contract import auth

        body = auth.RoleUpdate(role=auth.Role(role)).model_dump(mode="json")
        return auth.UserView.read(self._send("PUT", f"/users/{name}/role", json=body).content)

    def set_disabled(self, name: str, disabled: bool) -> auth.UserView:
        from starforge.contract import auth

        action = "disable" if disabled else "enable"
        return self._post(f"/users/{name}/{action}", auth.UserView)

    def tokens(self) -> auth.TokenList:
        from starforge.contract import auth

        return self._get("/tokens", auth.TokenList)

    def create_token(
        self, *, name: str | None = None, expires_days: int | None = None
    ) -> auth.TokenCreated:
        from starforge.contract import auth

        body = auth.TokenCreate(name=name, expires_days=expires_days)
        return self._post("/tokens", auth.TokenCreated, body)

    def revoke_token(self, ref: str) -> auth.TokenView:
        from starforge.contract import auth

        return self._post(f"/tokens/{ref}/revoke", auth.TokenView)

    # ---- sweeps (contract.sweeps) --------------------------------------------------------------

    def submit_sweep(self, request: sweeps.SweepRequest) -> sweeps.SweepCreated:
        from starforge.contract import sweeps

        return self._post("/sweeps", sweeps.SweepCreated, request)

    def list_sweeps(self, *, limit: int = 50) -> sweeps.SweepList:
        from starforge.contract import sweeps

        return self._get("/sweeps", sweeps.SweepList, limit=limit)

    def sweep(self, ref: str, *, metric: str | None = None) -> sweeps.SweepView:
        from starforge.contract import sweeps

        return self._get(f"/sweeps/{ref}", sweeps.SweepView, metric=metric)

    def sweep_runs(self, ref: str) -> api.RunList:
        return self._get(f"/sweeps/{ref}/runs", api.RunList)

    def stop_sweep(self, ref: str) -> sweeps.SweepStopped:
        from starforge.contract import sweeps

        return self._post(f"/sweeps/{ref}/stop", sweeps.SweepStopped)
