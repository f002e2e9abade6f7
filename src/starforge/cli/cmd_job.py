"""``sf job ls|status|logs|stop``: follow and control runs. A run id may be any unambiguous
prefix; no id means the latest run (for ``logs`` and ``status``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from starforge.cli.output import ago, out, status_text

# Command modules import the client lazily, inside each command: `sf --help` stays fast.
if TYPE_CHECKING:
    from starforge.client.http import Client
    from starforge.contract.api import RunView

app = typer.Typer(help="Follow and control runs.", no_args_is_help=True)
JsonOpt = Annotated[bool, typer.Option("--json", help="Print a JSON document for scripts.")]
RunArg = Annotated[
    str | None, typer.Argument(help="Run id or any unambiguous prefix (default: your latest run).")
]


def resolve(client: Client, ref: str | None) -> RunView:
    from starforge.contract.errors import RunNotFound

    if ref:
        return client.get_run(ref)
    runs = client.list_runs(limit=1).runs
    if not runs:
        raise RunNotFound("you have no runs yet", hint="submit one with `sf submit EXP ...`")
    return client.get_run(runs[0].run_id)


@app.command("ls")
def list_runs(
    limit: Annotated[int, typer.Option("--limit", "-n", help="How many runs to show.")] = 20,
    status: Annotated[
        str | None, typer.Option("--status", help="Only runs in this status.")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """List your runs, newest first.

    Example: sf job ls --status running
    """
    from starforge.cli.connect import connect

    out.set_json(json_out)
    with connect() as client:
        runs = client.list_runs(limit=limit, status=status).runs
    out.data([r.model_dump(mode="json", exclude={"spec", "events"}) for r in runs])
    if not runs:
        out.line("no runs yet")
        return
    out.table(
        ["RUN", "STATUS", "EXPERIMENT", "METHOD", "GPUS", "SUBMITTED", "REASON"],
        [
            [
                r.run_id,
                status_text(r.status),
                f"{r.project}/{r.experiment}",
                r.method,
                str(r.gpus),
                ago(r.created_at),
                r.reason,
            ]
            for r in runs
        ],
    )


@app.command()
def status(run: RunArg = None, json_out: JsonOpt = False) -> None:
    """Show a run: status and why, resources, provenance, attempts.

    Example: sf job status r-7f3a
    """
    from starforge.cli.connect import connect

    out.set_json(json_out)
    with connect() as client:
        view = resolve(client, run)
    out.data(view.model_dump(mode="json"))
    end = f" ({view.end_reason}, exit code {view.exit_code})" if view.end_reason else ""
    pools = ", ".join(f"{p.name}: {p.nodes} x {p.gpus_per_node} {p.series}" for p in view.pools)
    rows = [
        ("run", view.run_id),
        ("experiment", f"{view.project}/{view.experiment}"),
        ("method", view.method),
        ("status", status_text(view.status) + end),
        ("reason", view.reason or "-"),
        ("profile", " ".join(view.profiles)),
        ("pools", pools or "-"),
        ("commit", view.git_commit + (" (dirty)" if view.git_dirty else "")),
        ("submitted", ago(view.created_at)),
        ("started", ago(view.started_at)),
        ("ended", ago(view.ended_at)),
        ("run dir", view.run_dir or "-"),
    ]
    for key, value in rows:
        out.line(f"[bold]{key:>10}[/bold]  {value}")
    if view.attempts:
        out.line("")
        out.table(
            ["ATTEMPT", "STARTED", "ENDED", "EXIT", "REASON", "LOG"],
            [
                [
                    str(a.number),
                    ago(a.started_at),
                    ago(a.ended_at),
                    "-" if a.exit_code is None else str(a.exit_code),
                    a.end_reason or "-",
                    a.log_path,
                ]
                for a in view.attempts
            ],
        )


@app.command()
def logs(
    run: RunArg = None,
    lines: Annotated[
        int,
        typer.Option(
            "-n",
            "--tail",
            help="Lines of history to print first; 0 prints every attempt's whole log.",
        ),
    ] = 2000,
    no_follow: Annotated[
        bool,
        typer.Option("--no-follow", help="Print and exit instead of following until the run ends."),
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Print a run's log and follow it until the run ends.

    Examples: sf job logs · sf job logs r-7f3a -n 0 --no-follow
    """
    from starforge.cli import logs as log_view
    from starforge.cli.connect import connect

    out.set_json(json_out)
    with connect() as client:
        view = resolve(client, run)
        if json_out:
            text = []
            for a in view.attempts:
                chunk_text, _, _ = log_view.read_attempt(client, view.run_id, a.number)
                text.append({"attempt": a.number, "log": chunk_text})
            out.data({"run_id": view.run_id, "status": view.status, "attempts": text})
            return
        final = log_view.tail_and_follow(client, view, lines, follow=not no_follow)
    if not no_follow:
        out.info(f"run {view.run_id} {status_text(final)}")


@app.command()
def stop(
    run: Annotated[str, typer.Argument(help="Run id or unambiguous prefix.")],
    json_out: JsonOpt = False,
) -> None:
    """Stop a run: SIGTERM to its processes, SIGKILL after a grace period. Works on queued runs.

    Example: sf job stop r-7f3a
    """
    from starforge.cli.connect import connect

    out.set_json(json_out)
    with connect() as client:
        view = client.get_run(run)
        result = client.stop(view.run_id)
    out.data({"run_id": view.run_id, **result.model_dump(mode="json")})
    if result.accepted:
        out.success(f"{view.run_id}: {result.message or 'stopping'} ({status_text(result.status)})")
    else:
        out.line(f"[yellow]not stopped:[/yellow] {result.message}")
