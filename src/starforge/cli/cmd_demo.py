"""``sf demo``: the first ten minutes, in one command.

Creates a lab, adds a ``trl/grpo`` experiment, builds a tiny model and prompts offline, commits,
submits to the embedded server and follows the run to its end, then shows how the reward moved.
Each step prints the command a user would type to do it by hand.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from starforge.cli import cmd_submit
from starforge.cli.output import out

EXPERIMENT = "grpo-demo"
SUBMIT_ARGS = {
    "model": "models/tiny-llama",
    "train_data": "data/train.jsonl",
    "validation_data": "data/val.jsonl",
}


def _step(text: str) -> None:
    out.line(f"\n[bold cyan]$ {text}[/bold cyan]")


def _run(args: list[str], cwd: Path) -> None:
    from starforge.contract.errors import StarForgeError

    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True)
    if result.stdout.strip():
        out.line(result.stdout.rstrip())
    if result.returncode != 0:
        raise StarForgeError(f"{' '.join(args)} failed: {result.stderr.strip()[-2000:]}")


def _summary(run_id: str) -> dict[str, float] | None:
    from starforge.cli.connect import connect

    with connect() as client:
        view = client.get_run(run_id)
        attempt = view.attempts[-1].number if view.attempts else 1
        text = client.logs(run_id, attempt=attempt, offset=0).data
    lines = [ln for ln in text.splitlines() if ln.startswith("[summary] ")]
    return json.loads(lines[-1].removeprefix("[summary] ")) if lines else None


def demo(
    directory: Annotated[Path, typer.Argument(help="Where to create the demo lab.")] = Path(
        "demo-lab"
    ),
) -> None:
    """Create a demo lab and run a real tiny GRPO job on the embedded server, end to end.

    Example: sf demo ./demo-lab
    """
    from starforge.contract.errors import GitError
    from starforge.project import experiments, lab

    root = directory.resolve()
    if not (root / lab.MARKER).exists():
        _step(f"sf init {directory} --yes")
        lab.init_lab(root)
    here = lab.find_lab(root)
    if not (here.experiments_dir / EXPERIMENT).exists():
        _step(f"sf new {EXPERIMENT} --method trl/grpo")
        experiments.new_experiment(here, EXPERIMENT, "trl/grpo")
    _step(f"python experiments/{EXPERIMENT}/prepare.py   # tiny model + prompts, offline")
    _run([sys.executable, f"experiments/{EXPERIMENT}/prepare.py"], root)
    _step(f"git add -A && git commit -m 'add {EXPERIMENT}'")
    _run(["git", "add", "-A"], root)
    staged = subprocess.run(["git", "diff", "--cached", "--quiet"], cwd=root)
    if staged.returncode == 1:
        _run(["git", "commit", "-q", "-m", f"Add {EXPERIMENT}"], root)
    elif staged.returncode != 0:
        raise GitError(f"git diff --cached failed in {root}")
    flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in SUBMIT_ARGS.items())
    _step(f"sf submit {EXPERIMENT} --profile h200:1 {flags} --follow")
    os.chdir(root)
    try:
        cmd_submit.submit(EXPERIMENT, profile=["h200:1"], follow=True, **SUBMIT_ARGS)
    finally:
        summary = _last_summary()
        if summary:
            out.line(
                f"\n[bold]reward[/bold]: {summary['first_reward']:.3f} at the first step "
                f"→ {summary['final_reward']:.3f} after {int(summary['steps'])} steps "
                f"(best {summary['max_reward']:.3f})"
            )


def _last_summary() -> dict[str, float] | None:
    from starforge.cli.connect import connect

    with connect() as client:
        runs = client.list_runs(limit=1).runs
    return _summary(runs[0].run_id) if runs else None
