"""``sf init`` and ``sf new``: scaffold a lab and add experiments to it (no server needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from starforge.cli.output import JsonOpt, out


def init(
    directory: Annotated[Path, typer.Argument(help="Folder of the new lab.")] = Path("."),
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            help="Project name (default: the folder's name); the console groups runs by it.",
        ),
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Create a lab: starforge.yaml, experiments/, configs/, common/, .gitignore and a git repo.

    Example: sf init my-lab --name rl-team
    """
    from starforge.contract.errors import UsageError
    from starforge.project import lab

    out.set_json(json_out)
    target = directory.resolve()
    if (
        not yes
        and not json_out
        and not typer.confirm(f"Create a StarForge lab in {target}?", default=True)
    ):
        raise UsageError("cancelled; nothing was created")
    created = lab.init_lab(target, name)
    out.data({"root": str(created.root), "project": created.name})
    out.success(f"created lab [bold]{created.name}[/bold] in {created.root}")
    if name is None and created.name != created.root.name:
        out.line(
            f"the project is named {created.name!r} after the folder {created.root.name!r} "
            "(a name holds letters, digits, '.', '_' and '-'); --name picks another"
        )
    out.line("next: [bold]sf new my-grpo --method trl/grpo[/bold]")


def new(
    name: Annotated[str, typer.Argument(help="Experiment name (a folder under experiments/).")],
    method: Annotated[
        str | None,
        typer.Option(
            "--method",
            "-m",
            help="Method id, e.g. trl/grpo, verl/grpo, custom/custom (`sf methods` lists them).",
        ),
    ] = None,
    framework_version: Annotated[
        str | None,
        typer.Option(
            "--framework-version", help="Framework version to lock (default: the method's)."
        ),
    ] = None,
    source: Annotated[
        str | None,
        typer.Option("--from", help="Fork an existing experiment (its files and method) instead."),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Create experiments/NAME from a method's template (or fork one) and lock the method.

    Examples: sf new my-grpo --method trl/grpo · sf new my-grpo-2 --from my-grpo
    """
    from starforge.contract.errors import UsageError
    from starforge.project import experiments, lab

    out.set_json(json_out)
    if source and method:
        raise UsageError("--from and --method exclude each other: a fork keeps its method")
    here = lab.find_lab()
    exp = experiments.new_experiment(
        here, name, method or "trl/grpo", framework_version=framework_version, source=source
    )
    assert exp.method is not None
    files = sorted(p.relative_to(here.root).as_posix() for p in exp.path.rglob("*") if p.is_file())
    out.data({"experiment": exp.name, "method": exp.method.model_dump(mode="json"), "files": files})
    origin = f"a fork of {source}" if source else "its template"
    out.success(
        f"created {exp.relpath} ({exp.method.id} {exp.method.version}, framework "
        f"{exp.method.framework_version}) from {origin}"
    )
    for f in files:
        out.line(f"  {f}")
    out.line(
        f"next: commit it (git add -A && git commit -m 'add {name}'), then "
        f"[bold]sf submit {name} --profile h200:1 ...[/bold] (see its README.md)"
    )
