"""Serving the console: the page at ``/``, its static files, the chart library, its API calls.

The console is a single page (``static/index.html`` + ``app.js`` + ``style.css``) that talks to the
same ``/api/v1`` as the CLI with the user's bearer token. A visitor who is not signed in gets a
sign-in page (paste a token); the token is kept in the tab's session storage, so it dies with the
tab (a link of the form ``/#/runs/ID?token=...`` also signs in; the fragment never reaches the
server). What the console then shows is what the API lets that user's role see, and its action
buttons are those ``GET /runs/{ref}/actions`` (or ``/sweeps/{id}/actions``) names: the actions the
API would accept from that caller now (``views``). Charts are
drawn by plotly.js, served from the ``plotly`` package installed from PyPI (its wheel ships
``package_data/plotly.min.js``), so no third-party file is copied into this repository.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path

from fastapi import APIRouter, Depends, FastAPI
from fastapi.responses import FileResponse, HTMLResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles

from starforge import __version__
from starforge.contract.api import API_PREFIX, ArtifactList
from starforge.contract.console import AllowedActions
from starforge.server.api.authz import PUBLIC, ReadRun, authorize
from starforge.server.api.deps import RuntimeDep, check_client_version
from starforge.server.console import views

STATIC = Path(__file__).resolve().parent / "static"
PLOTLY_JS = "plotly.min.js"

page = APIRouter(include_in_schema=False)
api = APIRouter()


@cache
def plotly_bundle() -> Path | None:
    """plotly.min.js inside the installed ``plotly`` package (found without importing it)."""
    spec = importlib.util.find_spec("plotly")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(folder) / "package_data" / PLOTLY_JS
        if candidate.is_file():
            return candidate
    return None


@page.get("/", dependencies=[authorize(PUBLIC)])
def index() -> HTMLResponse:
    html = (STATIC / "index.html").read_text(encoding="utf-8").replace("{{version}}", __version__)
    return HTMLResponse(html, headers={"Cache-Control": "no-cache"})


@page.get(f"/console/vendor/{PLOTLY_JS}", dependencies=[authorize(PUBLIC)])
def plotly_js() -> Response:
    bundle = plotly_bundle()
    if bundle is None:
        # The page still works (tables, logs); it shows this instead of the curves.
        return PlainTextResponse(
            "window.STARFORGE_NO_PLOTLY = 'the plotly package is not installed on the server';",
            media_type="text/javascript",
        )
    return FileResponse(
        bundle, media_type="text/javascript", headers={"Cache-Control": "max-age=86400"}
    )


@api.get("/runs/{ref}/artifacts", response_model=ArtifactList)
def run_artifacts(ref: str, rt: RuntimeDep, user: ReadRun) -> ArtifactList:
    return views.artifacts(rt, user, ref)


@api.get("/runs/{ref}/actions", response_model=AllowedActions)
def run_actions(ref: str, rt: RuntimeDep, user: ReadRun) -> AllowedActions:
    """Which of stop, pause, resume, retry the caller may take on the run now (the buttons)."""
    return views.run_actions(rt, user, ref)


@api.get("/sweeps/{sweep_id}/actions", response_model=AllowedActions)
def sweep_actions(sweep_id: str, rt: RuntimeDep, user: ReadRun) -> AllowedActions:
    """Whether the caller may stop the sweep now (its "stop sweep" button)."""
    return views.sweep_actions(rt, user, sweep_id)


def install(app: FastAPI) -> None:
    """Add the console's page, static files and API calls to ``app``."""
    app.include_router(page)
    app.include_router(api, prefix=API_PREFIX, dependencies=[Depends(check_client_version)])
    app.mount("/console/static", StaticFiles(directory=STATIC), name="console-static")
