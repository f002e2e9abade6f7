"""``sf admin usage [--by user|project|run] [--since DATE]``, ``sf admin usage quota USER
HOURS`` and ``sf admin maintenance drain|status|resume`` (admins only).

GPU-hours are each attempt's GPUs × its own recorded wall time, split at UTC midnight; with the
server's ``gpu_hour_prices`` each figure has its cost too. The daily
quota holds a user's new runs in the queue once their GPU-hours today reach it (running runs go
on). A drain pauses every run that can resume from a checkpoint and stops dispatch; ``resume``
requeues them in their order.
"""

from __future__ import annotations

from datetime import date
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from starforge.cli.output import JsonOpt, cost_text, figure, out

if TYPE_CHECKING:
    from starforge.contract.labops import MaintenanceStatus

app = typer.Typer(
    help="GPU-hours (and cost) per user, project, day or run; the daily GPU-hour quota.",
    invoke_without_command=True,
)
maintenance_app = typer.Typer(
    help="Maintenance: drain the cluster (pause what can resume), check, resume.",
    no_args_is_help=True,
)


def _since(value: str | None) -> date | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter(f"{value!r}: give a date as YYYY-MM-DD") from None


@app.callback()
def usage(
    ctx: typer.Context,
    by: Annotated[
        str, typer.Option("--by", help="day (user, project, day), user, project or run.")
    ] = "day",
    since: Annotated[
        str | None, typer.Option("--since", help="From this UTC day on (YYYY-MM-DD).")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Show GPU-hours used (GPUs × wall time of each attempt) and, where priced, their cost.

    Examples: sf admin usage · sf admin usage --by user --since 2026-11-01 --json ·
    sf admin usage --by run
    """
    if ctx.invoked_subcommand is not None:
        return
    from starforge.cli.connect import connect
    from starforge.client import labops

    out.set_json(json_out)
    with connect() as client:
        found = labops.usage_report(client, by, _since(since))
    if out.json_mode:  # a year per day is 10,000 rows: not dumped for a table
        out.data(found.model_dump(mode="json"))
    if found.by == "day":
        columns = ["DAY", "USER", "PROJECT", "GPU-HOURS"]
        rows = [[str(r.day), r.user, r.project, figure(r.gpu_hours)] for r in found.rows]
    elif found.by == "run":
        columns = ["RUN", "USER", "EXPERIMENT", "GPU-HOURS"]
        rows = [
            [r.run_id, r.user, f"{r.project}/{r.experiment}", figure(r.gpu_hours)]
            for r in found.rows
        ]
    else:
        columns = [found.by.upper(), "GPU-HOURS"]
        rows = [[getattr(r, found.by), figure(r.gpu_hours)] for r in found.rows]
    if found.currency or any(r.cost is not None for r in found.rows):
        columns.append(f"COST ({found.currency})" if found.currency else "COST")
        for r, row in zip(found.rows, rows, strict=True):
            row.append("-" if r.cost is None else figure(r.cost))
    # run ids whole (they are copied into `sf job status`); a long experiment name wraps
    out.table(columns, rows, wrap=("EXPERIMENT",) if found.by == "run" else None)
    out.line(f"total: {cost_text(found.total_gpu_hours, found.total_cost, found.currency)}")


@app.command("quota")
def quota(
    user: Annotated[str, typer.Argument(help="The user.")],
    hours: Annotated[str, typer.Argument(help="GPU-hours per UTC day, or 'none' for no limit.")],
    json_out: JsonOpt = False,
) -> None:
    """Set a user's daily GPU-hour quota.

    Examples: sf admin usage quota alice 48 · sf admin usage quota alice none
    """
    from starforge.cli.connect import connect
    from starforge.client import labops

    out.set_json(json_out)
    limit: float | None = None
    if hours.lower() != "none":
        try:
            limit = float(hours)
        except ValueError:
            raise typer.BadParameter(f"{hours!r}: give GPU-hours (e.g. 48) or 'none'") from None
        if limit < 0:
            raise typer.BadParameter("GPU-hours cannot be negative")
    with connect() as client:
        found = labops.set_daily_quota(client, user, limit)
    out.data(found.model_dump(mode="json"))
    cap = "no limit" if found.daily_quota is None else f"{found.daily_quota:g} GPU-hours a day"
    out.success(f"daily quota of {found.user}: {cap} ({found.today:.2f} used today)")


def _print_maintenance(found: MaintenanceStatus) -> None:
    if not found.active:
        out.line(escape(found.message or "no maintenance: the scheduler runs"))
        return
    note = f" — {escape(found.note)}" if found.note else ""
    out.line(f"[bold]maintenance[/bold] since {found.started_at} by {found.started_by}{note}")
    out.line("dispatch is stopped: new submissions queue and wait")
    if found.paused:
        pausing = set(found.pausing)
        out.line(f"paused by the drain ({len(found.paused)}):")
        for run_id in found.paused:
            out.line(f"  {run_id}" + ("  (still saving a checkpoint)" if run_id in pausing else ""))
    if found.blockers:
        out.line(f"[yellow]blockers[/yellow] ({len(found.blockers)}): runs that cannot resume")
        out.table(
            ["RUN", "USER", "STATUS", "WHY"],
            [[b.run_id, b.user, b.status, escape(b.why)] for b in found.blockers],
        )
    if found.executor_unknown:
        out.line(f"[yellow]executor[/yellow]: {escape(found.executor_unknown)}")
    # The message says the verdict itself ("safe to restart: ...", "not safe to restart yet: ...").
    colour = "green" if found.safe_to_restart else "red"
    out.line(f"[{colour}]{escape(found.message)}[/{colour}]")


@maintenance_app.command("drain")
def drain(
    note: Annotated[str, typer.Option("--note", help="Why (shown in waiting runs' reason).")] = "",
    json_out: JsonOpt = False,
) -> None:
    """Stop dispatch and pause every run that can resume from a checkpoint.

    Example: sf admin maintenance drain --note "driver upgrade"
    """
    from starforge.cli.connect import request
    from starforge.client import labops

    found = request(json_out, lambda client: labops.drain(client, note))
    _print_maintenance(found)


@maintenance_app.command("status")
def maintenance_status(json_out: JsonOpt = False) -> None:
    """Show the drain: paused runs, blockers, and whether it is safe to restart."""
    from starforge.cli.connect import request
    from starforge.client import labops

    found = request(json_out, labops.maintenance_status)
    _print_maintenance(found)


@maintenance_app.command("resume")
def maintenance_resume(json_out: JsonOpt = False) -> None:
    """End maintenance: dispatch again and requeue the drained runs in their order."""
    from starforge.cli.connect import request
    from starforge.client import labops

    found = request(json_out, labops.end_maintenance)
    out.success(found.message)
