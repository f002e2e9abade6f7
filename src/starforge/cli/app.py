"""The ``sf`` command tree, loaded lazily: a command's module is imported only when it runs.

``sf --help`` and ``sf`` alone must start in a blink, so the root group lists its commands from
:data:`COMMANDS` (name, where the code lives, the one-line summary, the help panel) without
importing any of them, and renders its help in plain text (no rich, no markdown). Running
``sf job ls`` imports ``cmd_job`` and nothing else of the tree; ``sf job --help`` keeps typer's
rich help, as it has loaded the group anyway.

Registering a command or group is one line in :data:`COMMANDS`::

    Lazy("dataset", "starforge.cli.cmd_datasets:app", "Upload and list datasets.", "Data"),

``target`` is ``"module:attr"``: a ``typer.Typer`` (a group), a function (one command), or a
function named ``*_group`` that builds and returns a ``typer.Typer`` (a group assembled from
several modules). The summary is what ``sf --help`` shows; a test checks it against the
command's own first help line. Commands registered the eager way (``app.command()(fn)``,
``app.add_typer(...)``) still work and are listed after the lazy ones.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any

import typer
from typer.core import TyperGroup

from starforge import __version__
from starforge.cli import coercion

coercion.install()  # no pydantic validator for a value typer keeps as it is

PANELS = ("Setup", "Experiment", "Job", "Management")


@dataclass(frozen=True)
class Lazy:
    name: str
    target: str  # "module:attr"
    summary: str  # the line `sf --help` shows
    panel: str = "Commands"


COMMANDS: tuple[Lazy, ...] = (
    Lazy(
        "init",
        "starforge.cli.cmd_lab:init",
        "Create a lab: starforge.yaml, experiments/, configs/, common/, .gitignore and a git repo.",
        "Setup",
    ),
    Lazy(
        "demo",
        "starforge.cli.cmd_demo:demo",
        "Create a demo lab and run a real tiny GRPO job on the embedded server, end to end.",
        "Setup",
    ),
    Lazy(
        "new",
        "starforge.cli.cmd_lab:new",
        "Create experiments/NAME from a method's template (or fork one) and lock the method.",
        "Experiment",
    ),
    Lazy(
        "methods",
        "starforge.cli.cmd_methods:methods",
        "List the catalog's methods, or describe one: runtimes, roles, parameters.",
        "Experiment",
    ),
    Lazy(
        "ls",
        "starforge.cli.cmd_methods:ls",
        "List the lab's experiments with their method, framework version and lock state.",
        "Experiment",
    ),
    Lazy(
        "validate",
        "starforge.cli.cmd_methods:validate",
        "Validate an experiment: lock, composed config, parameters, framework checks.",
        "Experiment",
    ),
    Lazy("submit", "starforge.cli.cmd_submit:submit", "Submit an experiment as a run.", "Job"),
    Lazy("job", "starforge.cli.app:job_group", "Follow and control runs.", "Job"),
    Lazy(
        "status",
        "starforge.cli.cmd_status:status",
        "Show the profiles, the cluster's free GPUs, your quota and usage, and your runs.",
        "Job",
    ),
    Lazy(
        "server",
        "starforge.cli.cmd_server:app",
        "Run the embedded control plane on this machine.",
        "Management",
    ),
    Lazy(
        "admin",
        "starforge.cli.cmd_admin:app",
        "Administer the control plane (admins only).",
        "Management",
    ),
    Lazy(
        "login",
        "starforge.cli.cmd_auth:login",
        "Sign in to a team server; later commands use it until `sf logout`.",
        "Management",
    ),
    Lazy(
        "logout",
        "starforge.cli.cmd_auth:logout",
        "Forget the saved server and token; commands go back to the local embedded server.",
        "Management",
    ),
    Lazy(
        "whoami",
        "starforge.cli.cmd_auth:whoami",
        "Show who you are on which server: user, role, server URL and versions.",
        "Management",
    ),
    Lazy(
        "token",
        "starforge.cli.cmd_auth:token_app",
        "Your API tokens: create one for a script or another machine, list, revoke.",
        "Management",
    ),
    Lazy(
        "export",
        "starforge.cli.cmd_export:export",
        "Export a run's checkpoint as a Hugging Face model folder (a run of its own).",
        "Job",
    ),
    Lazy(
        "eval",
        "starforge.cli.cmd_eval:eval_",
        "Evaluate a model with the experiment's method (loss, preference accuracy, reward).",
        "Job",
    ),
    Lazy(
        "sweep",
        "starforge.cli.cmd_sweep:app",
        "Sweeps: one run per combination of parameter values, with early stopping (ASHA).",
        "Job",
    ),
    Lazy(
        "dataset",
        "starforge.cli.cmd_dataset:app",
        "Platform datasets: push a folder as OWNER/NAME@VERSION once, use it from any run.",
        "Job",
    ),
    Lazy(
        "notify",
        "starforge.cli.cmd_notify:app",
        "Webhooks called when your runs end (signed, retried).",
        "Job",
    ),
    Lazy(
        "secret",
        "starforge.cli.cmd_secret:app",
        "Secrets your runs receive at start (values never shown).",
        "Management",
    ),
    # A new group is one line here (see the module docstring).
)


@functools.cache
def job_group() -> typer.Typer:
    """``sf job``: cmd_job's group plus ``metrics``, ``console`` and ``diff``, which live in their
    own modules and build on cmd_job (never the reverse)."""
    from starforge.cli import cmd_diff, cmd_job, cmd_metrics

    cmd_job.app.command("metrics")(cmd_metrics.metrics)
    cmd_job.app.command("console")(cmd_metrics.console)
    cmd_job.app.command("diff")(cmd_diff.diff)
    return cmd_job.app


def load(entry: Lazy, markup: Any) -> Any:
    """The click command ``entry`` names (imports its module now)."""
    module, _, attr = entry.target.partition(":")
    obj = getattr(importlib.import_module(module), attr)
    if not isinstance(obj, typer.Typer) and attr.endswith("_group"):
        obj = obj()
    if isinstance(obj, typer.Typer):
        command = typer.main.get_group(obj)
    else:
        info = typer.models.CommandInfo(name=entry.name, callback=obj)
        command = typer.main.get_command_from_info(
            info, pretty_exceptions_short=True, rich_markup_mode=markup
        )
    command.name = entry.name
    command.rich_help_panel = entry.panel  # type: ignore[attr-defined]
    return command


class _Commands(MutableMapping[str, Any]):
    """The root's commands: eager ones as given, lazy ones imported on first lookup."""

    def __init__(self, eager: MutableMapping[str, Any], markup: Any) -> None:
        self.eager = eager
        self.markup = markup
        self.lazy = {e.name: e for e in COMMANDS if e.name not in eager}

    def __getitem__(self, name: str) -> Any:
        if name not in self.eager and name in self.lazy:
            self.eager[name] = load(self.lazy[name], self.markup)
        return self.eager[name]

    def __setitem__(self, name: str, value: Any) -> None:
        self.eager[name] = value

    def __delitem__(self, name: str) -> None:
        self.eager.pop(name, None)
        self.lazy.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        yield from self.lazy
        yield from (n for n in self.eager if n not in self.lazy)

    def __len__(self) -> int:
        return len(set(self.lazy) | set(self.eager))

    def __contains__(self, name: object) -> bool:
        return name in self.lazy or name in self.eager


class LazyGroup(TyperGroup):
    """The root group: lazy commands, and a plain-text help that imports none of them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = _Commands(self.commands, self.rich_markup_mode)

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)

    def summaries(self) -> list[tuple[str, str, str]]:
        """(panel, name, summary) of every command, importing only eager ones' help."""
        commands: _Commands = self.commands  # type: ignore[assignment]
        rows = [(e.panel, e.name, e.summary) for e in commands.lazy.values()]
        for name, cmd in commands.eager.items():
            if name not in commands.lazy and not getattr(cmd, "hidden", False):
                panel = getattr(cmd, "rich_help_panel", None) or "Commands"
                rows.append((panel, name, cmd.get_short_help_str(limit=80)))
        return rows

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self.format_usage(ctx, formatter)
        self.format_help_text(ctx, formatter)
        self.format_options(ctx, formatter)
        self.format_epilog(ctx, formatter)

    def format_options(self, ctx: Any, formatter: Any) -> None:
        records = [r for p in self.get_params(ctx) if (r := p.get_help_record(ctx)) is not None]
        if records:
            with formatter.section("Options"):
                formatter.write_dl(records)
        rows = self.summaries()
        panels = [*PANELS, *sorted({p for p, _, _ in rows} - set(PANELS))]
        for panel in panels:
            entries = [(name, summary) for p, name, summary in rows if p == panel]
            if entries:
                with formatter.section(panel):
                    formatter.write_dl(entries)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"sf {__version__}")
        raise typer.Exit()


app = typer.Typer(
    name="sf",
    cls=LazyGroup,
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
    ca_file: str | None = typer.Option(
        None,
        "--ca-file",
        metavar="CA.pem",
        help="Trust the server's certificate by this CA (default $STARFORGE_CA_FILE, else the "
        "one `sf login` kept).",
    ),
) -> None:
    """StarForge command line."""
    from starforge.client import config

    config.use_ca_file(ca_file)  # every command: an earlier main() in this process may have set it
