"""``sf job rerun RUN [-s KEY=VALUE ...] [--profile P]``: a new run made from what RUN recorded.

Nothing is read from the lab and nothing is uploaded: the server reuses the run's package, its
parameters, its image and dataset versions as pinned, its profile and inputs
(``server/services/runs/reruns``). The command says which keys the overrides changed, from what.
Registered on the ``sf job`` app by :mod:`starforge.cli.cmd_job`.
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Annotated, Any

import typer

from starforge.cli.output import JsonOpt, human_bytes, out, status_text

if TYPE_CHECKING:
    from starforge.client.http import Client
    from starforge.contract.reruns import RerunChange, RerunRequest, RerunResponse


def _shown(value: Any) -> str:
    """A value as the user would type it after ``-s``: ``0.001``, ``true``, ``h200:1``."""
    if value is None:
        return "unset"
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    return json.dumps(value)


def describe(change: RerunChange) -> str:
    """``learning_rate=0.001 (was 0.0001)``."""
    return f"{change.key}={_shown(change.new)} (was {_shown(change.old)})"


def _send(client: Client, run: str, request: RerunRequest) -> RerunResponse:
    """A lost answer is asked again with the same key: never two runs for one rerun."""
    from starforge.contract.errors import ServerUnreachable

    try:
        return client.rerun(run, request)
    except ServerUnreachable:
        return client.rerun(run, request)


def rerun(
    run: Annotated[str, typer.Argument(help="The run to rerun: its id or an unambiguous prefix.")],
    set_: Annotated[
        list[str],
        typer.Option(
            "--set",
            "-s",
            help="Change a method parameter: KEY=VALUE (repeatable; typed and checked against "
            "the method, as for `sf submit`).",
        ),
    ] = [],  # noqa: B006
    profile: Annotated[
        list[str],
        typer.Option(
            "--profile",
            "-p",
            help="Other resources: NAME[:GPUS] (repeatable, as for `sf submit`); "
            "default: the run's own.",
        ),
    ] = [],  # noqa: B006
    json_out: JsonOpt = False,
) -> None:
    """Rerun a run exactly: a new run with its package (nothing uploaded), its parameters and
    resolved config, its image digest, its dataset versions, its profile and inputs, changed only
    by -s and --profile. The new run records which run it reruns (`sf job status`).

    Example: sf job rerun r-7f3a · sf job rerun r-7f3a -s learning_rate=1e-4 --profile h200:8
    """
    from rich.markup import escape

    from starforge.cli.connect import connect
    from starforge.contract.params import split_set
    from starforge.contract.reruns import RerunRequest

    if not run.strip():
        raise typer.BadParameter("a run id cannot be empty; give a run id or a prefix of one")
    for raw in set_:  # KEY=VALUE in form here; the server types the value by the method
        split_set(raw)
    out.set_json(json_out)
    request = RerunRequest(sets=set_, profiles=profile or None, idempotency_key=uuid.uuid4().hex)
    with connect() as client:
        resp = _send(client, run, request)
        console_url = client.console_url(resp.run_id)
    out.data(
        {
            **resp.model_dump(mode="json"),
            "files_uploaded": 0,  # the server holds the package: a rerun sends no file
            "bytes_uploaded": 0,
            "console_url": console_url,
        }
    )
    for warning in resp.warnings:
        out.warn(warning)
    what = ", ".join(describe(c) for c in resp.changes)
    out.success(
        f"rerun of {resp.rerun_of}"
        + (f" with {escape(what)}" if what else ", nothing changed")
        + f": [bold]{resp.run_id}[/bold] {status_text(resp.status)}"
        + (f" ({escape(resp.message)})" if resp.message else "")
    )
    for note in resp.notes:
        out.line(f"  {escape(note)}")
    out.line(
        f"  uploaded 0 files; reused the {resp.package_files} file(s) "
        f"({human_bytes(resp.package_bytes)}) of {resp.rerun_of}'s package"
    )
    out.line(f"  console: {escape(console_url)}")
    out.line(f"  follow it: [bold]sf job logs {resp.run_id}[/bold]")
