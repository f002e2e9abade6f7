"""Launch plans of step runs (``--then export``, ``--then eval``, ``sf export``).

A step run's JobSpec carries a :class:`~starforge.contract.steps.StepSpec`; instead of the
experiment's entrypoint the runner starts a platform program, ``python -m starforge.steps.ACTION``,
with paths on the shared storage: the source run's output folder is a sibling of the step run's
own (same user, project and experiment), so nothing here touches the disk and ``--dry-run``
compiles the same command as the runner. Where each step writes:

- export: ``<step run>/out/export/`` (a Hugging Face folder with a README.md model card);
- eval: ``<step run>/out/eval/report.json``.

For ``verl/*`` and ``nemo-rl/*`` the export program resolves the checkpoint and runs the
framework's own converter, whose command line is :func:`converter_argv` (golden-tested; those
need the framework's image). Both converters create their target folder themselves, and NeMo-RL's
refuses one that exists, so the export program hands them a path that does not exist yet. Where
a verl checkpoint keeps its model depends on the trainer that wrote it (:data:`VERL_MODEL_SUBDIR`);
the export plan names it (``--subdir``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from starforge.catalog.adapters.base import CompileContext, LaunchPlan
from starforge.contract.env import input_location
from starforge.contract.errors import RunnerError
from starforge.contract.layout import RunLayout
from starforge.contract.steps import EVAL_REPORT, EXPORT_DIR, StepSpec

CHECKPOINTS = "checkpoints"  # under a training run's out dir (adapters' platform_config)
NEMO_RL_DIR = "/opt/nemo-rl"
# The model's folder inside a verl checkpoint, by the entry module that wrote it: the PPO trainer
# saves global_step_N/actor/ (and critic/), the SFT trainer its engine's shards in global_step_N/.
VERL_MODEL_SUBDIR = {"verl.trainer.main_ppo": "actor", "verl.trainer.sft_trainer": ""}


def source_out(ctx: CompileContext, run_id: str) -> str:
    """The output folder of ``run_id``, a run of the same experiment as this step run."""
    return str(RunLayout(Path(ctx.binding.run_dir).parent / run_id).out)


def converter_argv(
    framework: str, checkpoint: str, target: str, *, nemo_dir: str = "", subdir: str = ""
) -> list[str]:
    """The framework's own command that turns one checkpoint into a Hugging Face folder.

    ``target`` must not exist yet (NeMo-RL's converter refuses an existing folder); ``subdir``
    is the model's folder inside a verl checkpoint (``actor`` for PPO, none for SFT)."""
    if framework == "verl":
        # verl >= 0.4: the FSDP shards (global_step_N/actor, or global_step_N for SFT) merged
        # into one HF model; the merger makes the target folder.
        return [
            "python",
            "-m",
            "verl.model_merger",
            "merge",
            "--backend",
            "fsdp",
            "--local_dir",
            f"{checkpoint}/{subdir}" if subdir else checkpoint,
            "--target_dir",
            target,
        ]
    if framework == "nemo-rl":
        # NeMo-RL's converter of a step_N DCP checkpoint, with the config it was trained with.
        script = f"{nemo_dir or NEMO_RL_DIR}/examples/converters/convert_dcp_to_hf.py"
        return [
            "uv",
            "run",
            "python",
            script,
            f"--config={checkpoint}/config.yaml",
            f"--dcp-ckpt-path={checkpoint}/policy/weights",
            f"--hf-ckpt-path={target}",
        ]
    raise RunnerError(f"no export converter for framework {framework!r}")


def card_input(ctx: CompileContext, step: StepSpec) -> dict[str, object]:
    """What the model card records that only the control plane knew (see ``StepSpec``)."""
    spec = ctx.spec
    model = spec.inputs.model
    return {
        "run_id": step.root_run_id,
        "project": spec.project,
        "experiment": spec.experiment,
        "method": spec.method.id,
        "method_version": spec.method.version,
        "framework_version": spec.method.framework_version,
        "git_commit": spec.provenance.git_commit,
        "git_dirty": spec.provenance.git_dirty,
        "base_model": model.value if model else "",
        "base_model_location": input_location(model, ctx.work_dir) if model else "",
        "hyperparams": spec.hyperparams,
        "config": ctx.config,
        "data": [d.model_dump(mode="json") for d in step.data],
        "metrics": step.metrics,
    }


def export_plan(ctx: CompileContext, step: StepSpec) -> LaunchPlan:
    state = f"{ctx.state_dir}/attempt-{ctx.binding.attempt}.export-card.json"
    argv = [
        sys.executable,
        "-m",
        "starforge.steps.export",
        "--framework",
        ctx.method.framework,
        "--checkpoints",
        f"{source_out(ctx, step.source_run_id)}/{CHECKPOINTS}",
        "--out",
        f"{ctx.binding.out_dir}/{EXPORT_DIR}",
        "--card",
        state,
        "--format",
        "huggingface",
    ]
    if step.checkpoint_step is not None:
        argv += ["--step", str(step.checkpoint_step)]
    if ctx.method.framework == "verl":
        subdir = VERL_MODEL_SUBDIR.get(ctx.method.entrypoint.module, "")
        argv += ["--subdir", subdir] if subdir else []
    files = {state: json.dumps(card_input(ctx, step), indent=2, sort_keys=True, default=str)}
    return LaunchPlan(argv=argv, cwd=ctx.work_dir, env=dict(ctx.env), files=files)


def eval_argv(
    *, model: str, method: str, config: str, data: str, out_file: str, exp_dir: str | None = None
) -> list[str]:
    """The eval program's command line: a pipeline's eval step and ``sf eval`` alike
    (``exp_dir``: where the experiment's files are, when not the working directory)."""
    argv = [sys.executable, "-m", "starforge.steps.eval", "--model", model, "--method", method]
    argv += ["--config", config, "--data", data, "--out", out_file]
    return argv + (["--exp-dir", exp_dir] if exp_dir is not None else [])


def eval_plan(ctx: CompileContext, step: StepSpec) -> LaunchPlan:
    """``python -m starforge.steps.eval`` on the exported model (``starforge.steps.eval``)."""
    config_path = f"{ctx.state_dir}/attempt-{ctx.binding.attempt}.eval-config.yaml"
    data = input_location(ctx.spec.inputs.validation_data, ctx.work_dir)
    model = f"{source_out(ctx, step.source_run_id)}/{EXPORT_DIR}"
    argv = eval_argv(
        model=model,
        method=ctx.method.id,
        config=config_path,
        data=data or "",
        out_file=f"{ctx.binding.out_dir}/{EVAL_REPORT}",
    )
    files = {config_path: yaml.safe_dump(ctx.config, sort_keys=True)}
    return LaunchPlan(argv=argv, cwd=ctx.exp_dir, env=dict(ctx.env), files=files)


def compile(ctx: CompileContext) -> LaunchPlan:
    step = ctx.spec.step
    if step is None:
        raise RunnerError("not a step run")
    if step.action == "export":
        return export_plan(ctx, step)
    return eval_plan(ctx, step)
