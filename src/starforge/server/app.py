"""The FastAPI application factory.

:func:`create_app` wires the routers under ``/api/v1``, the error handlers and a lifespan that
builds the runtime (migrating the database), removes temporary uploads left by killed uploads,
registers the local user when embedded, and runs the scheduler and reconciler loops as asyncio
tasks for as long as the app serves, in the one process that leads (``loops/leader``: always on
SQLite; elected among the processes on PostgreSQL). Stopping the app cancels the loops only:
runners are separate process groups and keep running. Every request body is bounded by
:class:`starforge.server.api.bodies.BodyLimit`, and every request authenticated from its headers
by :class:`starforge.server.api.gate.Gatekeeper`, before a route reads a byte of it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic.json_schema import models_json_schema

from starforge import __version__
from starforge.contract.api import API_PREFIX
from starforge.server import fence
from starforge.server.api import (
    answers,
    auth,
    blobs,
    bodies,
    cluster,
    datasets,
    deps,
    diffs,
    errors,
    gate,
    images,
    ingest,
    labops,
    lifecycle,
    meta,
    pipelines,
    runs,
    stream,
    sweeps,
)
from starforge.server.api import secrets as secrets_api
from starforge.server.console import routes as console
from starforge.server.db import outage
from starforge.server.db import tables as _tables  # noqa: F401  (registers every ORM table)
from starforge.server.executors.base import Executor
from starforge.server.loops import leader, takeover
from starforge.server.loops.notify import notify_loop
from starforge.server.loops.reactions import reactions_loop
from starforge.server.loops.reconciler import reconciler_loop
from starforge.server.loops.scheduler import scheduler_loop
from starforge.server.loops.sweeps import sweep_loop
from starforge.server.runtime import Runtime, build_runtime
from starforge.server.services.access import users
from starforge.server.services.runs import lifecycle as run_lifecycle
from starforge.server.settings import Settings, secure_home

log = logging.getLogger(__name__)


def register_local_user(rt: Runtime) -> str:
    """Create (or renew) the embedded server's local user; return its name."""
    token = users.load_or_create_token(rt.settings.server_dir / "local-token")
    name = users.local_user_name()
    with rt.transaction() as session:
        users.ensure_user(session, name, token)
        users.make_admin(session, name)  # the embedded server's one user administers it
    return name


async def lead_loops(rt: Runtime, wake: asyncio.Event) -> None:
    """Run the scheduler and reconciler whenever this process leads."""

    async def leading() -> None:
        # A new term: every pass of these loops (their tasks and worker threads inherit this
        # context) is fenced by it, so a pass still running once another leads commits nothing.
        fence.TERM.set(await asyncio.to_thread(fence.begin_term, rt.engine))
        try:  # runners a dead leader launched report to this process from now on
            await asyncio.to_thread(run_lifecycle.publish_beacon, rt)
        except OSError:
            log.exception("could not publish the control plane's beacon")
        try:
            await asyncio.to_thread(takeover.finish_interrupted_starts, rt)
        except Exception as exc:  # the reconciler settles whatever this could not start
            if not outage.of(rt.engine).failed(exc):  # an outage is said once, not here
                log.exception("could not finish the starts a previous leader left")
        wake.set()  # a new leader places whatever waited while no one led
        await asyncio.gather(
            scheduler_loop(rt, wake),
            reconciler_loop(rt),
            sweep_loop(rt),
            notify_loop(rt),
            reactions_loop(rt),
        )

    def start_loops() -> list[asyncio.Task[None]]:
        return [asyncio.create_task(leading(), name="loops")]

    def on_change(leading: bool) -> None:
        rt.leader = leading

    election = await asyncio.to_thread(leader.Election, rt.engine)
    await leader.lead(election, start_loops, on_change)


def create_app(
    settings: Settings, *, executor: Executor | None = None, run_loops: bool = True
) -> FastAPI:
    """The app for ``settings``; ``executor`` and ``run_loops`` exist for tests."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await asyncio.to_thread(secure_home, settings)  # before the database and tokens exist
        rt = await asyncio.to_thread(build_runtime, settings, executor=executor)
        app.state.runtime = rt
        removed = await asyncio.to_thread(rt.storage.clean_uploads, settings.stale_upload_s)
        if removed:
            log.info("removed %d temporary upload(s) left by killed uploads", len(removed))
        if settings.embedded:
            name = await asyncio.to_thread(register_local_user, rt)
            log.info("local user %s registered", name)
        wake = asyncio.Event()
        rt.bind_loop(asyncio.get_running_loop(), wake)
        wake.set()  # place whatever waited in the queue while the server was down
        tasks = []
        if run_loops:
            tasks = [asyncio.create_task(lead_loops(rt, wake), name="leader")]
        try:
            yield
        finally:
            await leader.stop_tasks(tasks)
            rt.unbind_loop()
            rt.engine.dispose()
            getattr(rt.executor, "close", lambda: None)()  # the local executor's warm runner

    app = FastAPI(title="StarForge", version=__version__, lifespan=lifespan)
    errors.install(app)
    app.add_middleware(answers.ForClient)  # answers an older client in values it knows
    app.add_middleware(gate.Gatekeeper, api=app)  # inside BodyLimit: a declared 413 costs no read
    app.add_middleware(
        bodies.BodyLimit, limit=lambda method, path: bodies.limit_for(settings, method, path)
    )
    version_gate = [Depends(deps.check_client_version)]
    for module in (meta, blobs, runs, lifecycle, ingest, stream):
        app.include_router(module.router, prefix=API_PREFIX, dependencies=version_gate)
    app.include_router(cluster.router, prefix=API_PREFIX, dependencies=version_gate)
    app.include_router(auth.router, prefix=API_PREFIX, dependencies=version_gate)
    app.include_router(images.router, prefix=API_PREFIX, dependencies=version_gate)
    app.include_router(secrets_api.router, prefix=API_PREFIX, dependencies=version_gate)
    app.include_router(sweeps.router, prefix=API_PREFIX, dependencies=version_gate)
    app.include_router(labops.router, prefix=API_PREFIX, dependencies=version_gate)
    app.include_router(pipelines.router, prefix=API_PREFIX, dependencies=version_gate)
    app.include_router(datasets.router, prefix=API_PREFIX, dependencies=version_gate)
    app.include_router(diffs.router, prefix=API_PREFIX, dependencies=version_gate)
    console.install(app)
    install_openapi(app)
    return app


def install_openapi(app: FastAPI) -> None:
    """The served OpenAPI documents what the server answers: every route's error statuses with
    the error body (:func:`errors.document_errors`), whichever router added the route."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
            _document_parsed_bodies(schema)
            app.openapi_schema = errors.document_errors(schema, API_PREFIX)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _document_parsed_bodies(schema: dict[str, Any]) -> None:
    """Add the models of the bodies routes parse themselves (``bodies.json_body``) to the
    schema's components, where their ``requestBody`` refers to them."""
    pairs = [(m, "validation") for m in bodies.PARSED_BODIES.values()]
    _, found = models_json_schema(pairs, ref_template="#/components/schemas/{model}")
    known = schema.setdefault("components", {}).setdefault("schemas", {})
    for name, model_schema in found.get("$defs", {}).items():
        known.setdefault(name, model_schema)
