"""``sf export EXP --checkpoint run/RUN_ID[@step=N]``: a run's checkpoint as a Hugging Face model.

The export runs as a run of its own (queue, log, status: ``sf job logs``), the same step run that
``sf submit --then export`` makes. ``--dry-run`` prints the exact command the export would run,
compiled here from the experiment's method lock by the runner's own adapters, without a server;
only the paths the server decides are placeholders (``<storage>``, ``<user>``).
"""

from __future__ import annotations

import re
import sys
import uuid
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

if TYPE_CHECKING:
    from starforge.catalog.loader import Method
    from starforge.contract.jobspec import JobSpec
    from starforge.contract.steps import StepSpec

from starforge.cli.output import JsonOpt, out, status_text

CHECKPOINT = re.compile(r"^run/(?P<run>[A-Za-z0-9-]+)(?:@step=(?P<step>\d{1,9}))?$")
DRY_RUN_ID = "r-dryrun0000"


def parse_checkpoint(value: str) -> tuple[str, int | None]:
    """``run/RUN_ID[@step=N]`` as (run id, step or None); a usage error otherwise."""
    from starforge.contract.errors import UsageError

    match = CHECKPOINT.match(value.strip())
    if match is None:
        raise UsageError(
            f"--checkpoint {value!r} is not run/RUN_ID[@step=N]",
            hint="e.g. --checkpoint run/r-7f3a2b9c1d or --checkpoint run/r-7f3a2b9c1d@step=40",
        )
    step = match.group("step")
    return match.group("run"), int(step) if step is not None else None


def dry_run_argv(experiment: str, run_id: str, step: int | None) -> list[str]:
    """The export's command line, compiled offline from the lab's lock of ``experiment``."""
    from starforge.catalog.loader import get_method
    from starforge.contract.errors import LockError, Rejected
    from starforge.contract.jobspec import JobSpec, Provenance
    from starforge.contract.steps import StepSpec
    from starforge.project import experiments
    from starforge.project.lab import find_lab

    lab = find_lab()
    exp = experiments.load_experiment(lab, experiment)
    if exp.method is None:
        raise LockError(f"experiment {experiment!r}: {exp.lock_error}", hint="run `sf new` again")
    method = get_method(exp.method.id)
    if "export" not in method.actions:
        raise Rejected(f"method {method.id} declares no export")
    spec = JobSpec(
        project=lab.name,
        experiment=experiment,
        method=exp.method,
        profiles=["export"],
        provenance=Provenance(git_commit=f"<commit of {run_id}>", client_version="dry-run"),
    )
    step_spec = StepSpec(
        action="export", index=0, actions=["export"], root_run_id=run_id, source_run_id=run_id,
        checkpoint_step=step,
    )  # fmt: skip
    return step_argv(spec, method, step_spec, {})


def step_argv(spec: JobSpec, method: Method, step: StepSpec, config: dict[str, Any]) -> list[str]:
    """A step run's command line, with the paths the server decides as placeholders."""
    from starforge.catalog.adapters import CompileContext, compile_plan
    from starforge.contract.env import Binding

    run_dir = f"<storage>/runs/<user>/{spec.project}/{spec.experiment}/{DRY_RUN_ID}"
    binding = Binding(
        run_id=DRY_RUN_ID,
        attempt=1,
        user="<user>",
        storage_root="<storage>",
        run_dir=run_dir,
        work_dir=f"{run_dir}/work",
        out_dir=f"{run_dir}/out",
        log_path=f"{run_dir}/logs/attempt-1.log",
    )
    stepped = spec.model_copy(update={"steps": [], "step": step})
    ctx = CompileContext(spec=stepped, method=method, binding=binding, env={}, config=config)
    plan = compile_plan(ctx)
    # The job's Python, not this machine's: the first word is the interpreter's name only.
    return ["python", *plan.argv[1:]] if plan.argv[0] == sys.executable else plan.argv


def pipeline_argvs(
    spec: JobSpec, method: Method, config: dict[str, Any]
) -> list[tuple[str, list[str]]]:
    """Each ``--then`` step's command, as ``sf submit --dry-run`` shows it (the training run
    and its export are placeholders: ``<run>``, ``<export run>``)."""
    from starforge.contract.steps import StepSpec

    found = []
    for index, action in enumerate(spec.steps):
        source = "<export run>" if action == "eval" else "<run>"
        step = StepSpec(
            action=action, index=index, actions=list(spec.steps), root_run_id="<run>",
            source_run_id=source,
        )  # fmt: skip
        found.append((action, step_argv(spec, method, step, config)))
    return found


def export(
    experiment: Annotated[str, typer.Argument(help="The experiment the run belongs to.")],
    checkpoint: Annotated[
        str,
        typer.Option("--checkpoint", help="run/RUN_ID (its last checkpoint) or run/RUN_ID@step=N."),
    ],
    format_: Annotated[
        str, typer.Option("--format", help="The export format (huggingface).")
    ] = "huggingface",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the export's command; run nothing.")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Export a run's checkpoint as a Hugging Face model folder (a run of its own).

    Examples: sf export my-sft --checkpoint run/r-7f3a2b9c1d ·
    sf export my-sft --checkpoint run/r-7f3a2b9c1d@step=40 --dry-run
    """
    from starforge.contract.errors import UsageError

    out.set_json(json_out)
    run_id, step = parse_checkpoint(checkpoint)
    if format_ != "huggingface":
        raise UsageError(f"--format {format_!r} is not known", hint="the format is huggingface")
    if dry_run:
        argv = dry_run_argv(experiment, run_id, step)
        out.data({"argv": argv, "run_id": run_id, "step": step})
        out.line(escape(" ".join(argv)))
        out.line("nothing submitted (--dry-run)")
        return
    _submit(experiment, run_id, step)


def _submit(experiment: str, run_id: str, step: int | None) -> None:
    from starforge.cli.connect import connect
    from starforge.contract.api import ExportRequest
    from starforge.contract.errors import Rejected

    with connect() as client:
        view = client.get_run(run_id)
        if view.experiment != experiment:
            raise Rejected(
                f"run {view.run_id} is a run of {view.experiment!r}, not of {experiment!r}",
                hint=f"sf export {view.experiment} --checkpoint run/{view.run_id}",
            )
        body = ExportRequest(checkpoint_step=step, idempotency_key=uuid.uuid4().hex)
        resp = client.export_run(view.run_id, body)
    out.data(resp.model_dump(mode="json"))
    out.success(
        f"export [bold]{resp.run_id}[/bold] of {view.run_id}: {status_text(resp.status)}"
        + (f" ({escape(resp.message)})" if resp.message else "")
    )
    out.line(f"  follow it: [bold]sf job logs {resp.run_id}[/bold]")
