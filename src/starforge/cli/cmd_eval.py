"""``sf eval EXP --model run/RUN_ID | HUB_ID | PATH --data FILE [--dry-run]``.

Evaluates a model the way the experiment's method measures it (``starforge.steps.eval``: SFT
loss, DPO preference accuracy, GRPO reward) on this machine, with the experiment's composed
config (its ``eval.gate`` too) and, for GRPO, its ``reward.py``. ``--dry-run`` prints the exact
command and the config file it would write, offline: nothing runs, nothing is written.

The model is one of: ``run/RUN_ID`` (that run's Hugging Face folder: its ``out/export``, else
the ``out/final`` a TRL run writes; found through the control plane, so the run's storage must be
readable from here, as with the embedded server or a shared file system), an existing folder, or
a hub id (loaded from the local Hugging Face cache). Pipelines evaluate on the platform instead
(``sf submit EXP --then export --then eval``). Exit status: the program's (0, 2 bad input, 3 the
gate failed).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from starforge.catalog.adapters.steps import eval_argv
from starforge.cli.output import out
from starforge.contract.errors import UsageError
from starforge.contract.layout import RunLayout

Flag = typer.Option
RUN_REF = re.compile(r"run/(r-[A-Za-z0-9_-]{1,30}|[A-Za-z0-9_-]{1,30})")
HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")
HF_FOLDERS = ("export", "final")  # under a run's out dir, in order of preference
PLACEHOLDER = "<storage>/runs/<user>/{project}/{experiment}/{run}/out/export"


def model_kind(value: str) -> tuple[str, str]:
    """``("run", RUN_ID)``, ``("path", ABSOLUTE)`` or ``("hub", ID)``; else a usage error."""
    match = RUN_REF.fullmatch(value)
    if match:
        run = match[1] if match[1].startswith("r-") else "r-" + match[1]
        return "run", run
    path = Path(value).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise UsageError(
                f"--model {value}: not a Hugging Face model folder (no config.json)",
                hint="point --model at an exported folder (`sf export`), run/RUN_ID or a hub id",
            )
        return "path", str(path.resolve())
    if value.startswith(("/", ".", "~")) or not HUB_ID.fullmatch(value):
        raise UsageError(
            f"--model {value}: no such folder, and not a run/RUN_ID or a hub id",
            hint="give run/RUN_ID, a model folder, or a hub id such as org/name",
        )
    return "hub", value


def run_model_folder(run_id: str) -> str:
    """The Hugging Face folder of one of the user's runs, read where the control plane keeps it."""
    from starforge.cli.connect import connect

    with connect() as client:
        view = client.get_run(run_id)
    for name in HF_FOLDERS:
        folder = RunLayout(Path(view.run_dir)).out / name
        if (folder / "config.json").is_file():
            return str(folder)
    raise UsageError(
        f"--model run/{view.run_id}: no Hugging Face folder readable here under {view.run_dir}/out "
        f"({' or '.join(HF_FOLDERS)})",
        hint=f"export it first (`sf submit ... --then export`), or evaluate on the platform; "
        f"`sf job status {view.run_id}` shows the run",
    )


def eval_(
    experiment: Annotated[str, typer.Argument(help="Experiment name (experiments/NAME).")],
    model: Annotated[
        str, Flag("--model", help="run/RUN_ID, a Hugging Face model folder, or a hub id.")
    ],
    data: Annotated[Path, Flag("--data", help="Evaluation data, JSONL or Parquet.")],
    output: Annotated[
        Path | None,
        Flag("--out", help="Report file (default: eval/EXP/report.json in this folder)."),
    ] = None,
    dry_run: Annotated[
        bool, Flag("--dry-run", help="Print the exact command, offline; run nothing.")
    ] = False,
) -> None:
    """Evaluate a model with the experiment's method (loss, preference accuracy, reward).

    Examples:

      sf eval my-sft --model run/r-7f3a2b --data data/sft-val.jsonl

      sf eval my-grpo --model models/tiny-llama --data data/val.jsonl --dry-run
    """
    import yaml

    from starforge.project import experiments
    from starforge.project.lab import find_lab
    from starforge.project.validate import validate
    from starforge.steps.gate import EVAL_METRICS

    lab = find_lab(None)
    exp = experiments.load_experiment(lab, experiment)
    validated = validate(lab, exp, [])
    method = validated.method.id
    if method not in EVAL_METRICS:
        raise UsageError(
            f"method {method} has no platform eval (methods with one: {', '.join(EVAL_METRICS)})",
            hint="evaluate with the framework's own tools",
        )
    if not data.is_file():
        raise UsageError(f"--data {data}: no such file", hint="give a JSONL or Parquet file")
    kind, value = model_kind(model)
    report = (output or Path("eval") / experiment / "report.json").resolve()
    config_file = report.with_name(report.stem + ".config.yaml")
    location = value
    if kind == "run":
        location = (
            PLACEHOLDER.format(project=lab.name, experiment=experiment, run=value)
            if dry_run
            else run_model_folder(value)
        )
    argv = eval_argv(
        model=location,
        method=method,
        config=str(config_file),
        data=str(data.resolve()),
        out_file=str(report),
        exp_dir=str(lab.root / exp.relpath),
    )
    config_text = yaml.safe_dump(validated.run_config, sort_keys=True)
    if dry_run:
        out.data({"argv": argv, "config_file": str(config_file), "config": validated.run_config})
        out.line(f"[bold]writes[/bold] {escape(str(config_file))} (the composed config)")
        out.line(escape(" ".join(argv)))
        if kind == "run":
            out.line(f"(the model is {value}'s export folder, found when it runs)")
        out.line("nothing run (--dry-run)")
        return
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text(config_text)
    code = subprocess.call(argv)  # the program prints its metrics and the gate's verdict
    if code == 0:
        out.success(f"eval report: {report}")
    raise typer.Exit(code)
