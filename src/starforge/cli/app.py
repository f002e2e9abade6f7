"""The ``sf`` command tree."""

from __future__ import annotations

import typer

from starforge import __version__
from starforge.cli import (
    cmd_admin,
    cmd_auth,
    cmd_dataset,
    cmd_demo,
    cmd_eval,
    cmd_export,
    cmd_job,
    cmd_lab,
    cmd_methods,
    cmd_metrics,
    cmd_notify,
    cmd_secret,
    cmd_server,
    cmd_status,
    cmd_submit,
    cmd_sweep,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"sf {__version__}")
        raise typer.Exit()


app = typer.Typer(
    name="sf",
    help="StarForge: submit and run LLM post-training jobs.\n\n"
    "Start with `sf demo`, or: sf init my-lab · sf new my-grpo --method trl/grpo · "
    "sf submit my-grpo --profile h200:1 ...",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        "-V",
        callback=_version,
        is_eager=True,
        help="Print the version and exit.",
    ),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks on errors."),
) -> None:
    """StarForge command line."""


app.command(rich_help_panel="Setup")(cmd_lab.init)
app.command(rich_help_panel="Setup")(cmd_demo.demo)
app.command(rich_help_panel="Experiment")(cmd_lab.new)
app.command(rich_help_panel="Experiment")(cmd_methods.methods)
app.command("ls", rich_help_panel="Experiment")(cmd_methods.ls)
app.command(rich_help_panel="Experiment")(cmd_methods.validate)
app.command(rich_help_panel="Job")(cmd_submit.submit)
app.command(rich_help_panel="Job")(cmd_export.export)
app.command("eval", rich_help_panel="Job")(cmd_eval.eval_)
# `sf job metrics|console` live in their own module, which builds on cmd_job (never the reverse).
cmd_job.app.command("metrics")(cmd_metrics.metrics)
cmd_job.app.command("console")(cmd_metrics.console)
app.add_typer(cmd_job.app, name="job", rich_help_panel="Job")
app.add_typer(cmd_sweep.app, name="sweep", rich_help_panel="Job")
app.add_typer(cmd_dataset.app, name="dataset", rich_help_panel="Job")
app.command("status", rich_help_panel="Job")(cmd_status.status)
app.add_typer(cmd_server.app, name="server", rich_help_panel="Management")
app.add_typer(cmd_admin.app, name="admin", rich_help_panel="Management")
app.add_typer(cmd_notify.app, name="notify", rich_help_panel="Job")
app.command(rich_help_panel="Management")(cmd_auth.login)
app.command(rich_help_panel="Management")(cmd_auth.logout)
app.command(rich_help_panel="Management")(cmd_auth.whoami)
app.add_typer(cmd_auth.token_app, name="token", rich_help_panel="Management")
app.add_typer(cmd_secret.app, name="secret", rich_help_panel="Management")
