"""``sf methods``, ``sf ls``, ``sf validate``: the catalog and the lab's experiments, offline."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from starforge.cli.output import JsonOpt, out

LOCK_STYLE = {
    "current": "",
    "drifted": "[yellow]drifted[/yellow]",
    "incompatible": "[red]incompatible[/red]",
    "malformed": "[red]malformed[/red]",
}


def methods(
    method_id: Annotated[str | None, typer.Argument(help="A method id to describe.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """List the catalog's methods, or describe one: runtimes, roles, parameters.

    Examples: sf methods · sf methods trl/grpo
    """
    from starforge.catalog.loader import all_methods, get_method

    out.set_json(json_out)
    if method_id is None:
        found = list(all_methods().values())
        out.data(
            [
                {
                    "id": m.id,
                    "version": m.version,
                    "framework_version": m.runtime.default,
                    "summary": m.summary,
                }
                for m in found
            ]
        )
        out.table(
            ["METHOD", "VERSION", "FRAMEWORK", "SUMMARY"],
            [[m.id, m.version, m.runtime.default, m.summary] for m in found],
        )
        return
    m = get_method(method_id)
    out.data(m.model_dump(mode="json"))
    out.line(f"[bold]{m.id}[/bold] {m.version}: {escape(m.summary)}")
    out.line(
        f"  roles: {', '.join(m.roles)} · requires: {', '.join(m.requires) or '-'} · "
        f"observability: {m.observability} · after training: "
        f"{', '.join(m.lifecycle) or '-'}"
    )
    for action, needs in m.actions.items():  # what `sf submit --then ACTION` may add
        after = f", after {', '.join(needs.after)}" if needs.after else ""
        out.line(f"  action {action}: sf submit ... --then {action} ({needs.gpus} GPU(s){after})")
    for version, rt in m.runtime.versions.items():
        default = " (default)" if version == m.runtime.default else ""
        pins = ", ".join(rt.packages) or "user-managed"
        out.line(f"  framework {version}{default}: {rt.runtime_id} {rt.image} [{escape(pins)}]")
    if m.params:
        out.line("")
        rows = sorted(m.params.items(), key=lambda kv: (kv[1].group, kv[0]))
        out.table(
            ["GROUP", "PARAMETER", "TYPE", "DEFAULT", "DOC"],
            [
                [
                    p.group,
                    name,
                    escape(p.describe()),
                    "required" if p.required else ("-" if p.default is None else str(p.default)),
                    escape(p.doc),
                ]
                for name, p in rows
            ],
            # Names and defaults are what a researcher copies into `-s`: never cut them.
            wrap=("TYPE", "DOC"),
        )


def ls(json_out: JsonOpt = False) -> None:
    """List the lab's experiments with their method, framework version and lock state.

    Example: sf ls
    """
    from starforge.catalog.locks import lock_state
    from starforge.project import experiments, lab

    out.set_json(json_out)
    here = lab.find_lab()
    rows = []
    for name in experiments.list_experiments(here):
        exp = experiments.load_experiment(here, name)
        status = lock_state(exp.method)
        rows.append(
            {
                "experiment": name,
                "method": exp.method.id if exp.method else "?",
                "version": exp.method.version if exp.method else "",
                "framework_version": exp.method.framework_version if exp.method else "",
                "lock": status.state.value,
                "reasons": [exp.lock_error] if exp.lock_error else status.reasons,
            }
        )
    out.data(rows)
    if not rows:
        out.line("no experiments yet: sf new NAME --method trl/grpo")
        return
    out.table(
        ["EXPERIMENT", "METHOD", "VERSION", "FRAMEWORK", "LOCK"],
        [
            [
                r["experiment"],
                r["method"],
                r["version"],
                r["framework_version"],
                LOCK_STYLE[r["lock"]] or "current",
            ]
            for r in rows
        ],
    )


def validate(
    experiment: Annotated[str, typer.Argument(help="Experiment name.")],
    set_: Annotated[
        list[str],
        typer.Option("--set", "-s", help="Parameter override to validate too: KEY=VALUE."),
    ] = [],  # noqa: B006
    json_out: JsonOpt = False,
) -> None:
    """Validate an experiment: lock, composed config, parameters, framework checks.

    Example: sf validate my-grpo -s learning_rate=1e-5
    """
    from starforge.project import experiments, lab
    from starforge.project.validate import validate as run_validation

    out.set_json(json_out)
    here = lab.find_lab()
    exp = experiments.load_experiment(here, experiment)
    result = run_validation(here, exp, set_)
    out.data(
        {
            "experiment": experiment,
            "method": result.method.id,
            "lock": result.lock.state.value,
            "hyperparams": result.hyperparams,
            "warnings": result.warnings,
        }
    )
    for warning in result.warnings:
        out.warn(warning)
    out.success(
        f"{exp.relpath} is valid ({result.method.id}, lock {result.lock.state.value}, "
        f"{len(result.hyperparams)} parameters resolved)"
    )
