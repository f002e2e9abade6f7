"""TRL: the experiment's ``train.py`` reads its trainer arguments from ``$FORGE_CONFIG``.

The resolved arguments (config composed, parameters applied, ``output_dir`` set by the platform)
are written as YAML under the run's state dir, one file per attempt.

A run of one process is ``python train.py``. A run of more (several GPUs, several nodes, or
``cpu_processes_per_node`` > 1 on a CPU server) is one training: every node runs ``torchrun``
with the binding's node count, its rank, one process per GPU (or per configured CPU process) and
rank 0's address and port, and TRL's Trainer joins the process group torchrun describes (gloo on
the CPU). The strategy is the platform key ``starforge.strategy`` (the ``strategy`` parameter):
``ddp`` (the Trainer's default under torchrun), ``fsdp`` (the Trainer's ``fsdp`` arguments) or
``zero2``/``zero3`` (a DeepSpeed config given as the Trainer's ``deepspeed`` argument; the image
must have ``deepspeed``).
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

from starforge.catalog.adapters.base import (
    CompileContext,
    LaunchPlan,
    platform_config,
    torchrun_argv,
)
from starforge.contract import observability
from starforge.steps import gate

STRATEGY_KEY = "strategy"  # under the platform's section (``starforge: {strategy: fsdp}``)
STRATEGIES = ("ddp", "fsdp", "zero2", "zero3")


def strategy_args(strategy: str) -> dict[str, Any]:
    """The Trainer arguments that select ``strategy`` (none for DDP)."""
    if strategy == "fsdp":
        return {"fsdp": "full_shard auto_wrap"}
    if strategy in ("zero2", "zero3"):
        # "auto" lets the Trainer fill each value from its own arguments, so the two agree.
        return {
            "deepspeed": {
                "zero_optimization": {"stage": int(strategy[-1])},
                "train_batch_size": "auto",
                "train_micro_batch_size_per_gpu": "auto",
                "gradient_accumulation_steps": "auto",
                "gradient_clipping": "auto",
                "bf16": {"enabled": "auto"},
            }
        }
    return {}


def trainer_args(ctx: CompileContext) -> dict[str, Any]:
    """The Trainer's arguments: the platform config without the platform's own sections, with
    the chosen strategy's arguments written over it."""
    config = platform_config(ctx)
    config.pop(gate.SECTION, None)  # the platform's eval settings, not a trainer argument
    section = config.pop(observability.SECTION, None)
    chosen = section.get(STRATEGY_KEY, "ddp") if isinstance(section, dict) else "ddp"
    return {**config, **strategy_args(str(chosen))}


def compile(ctx: CompileContext) -> LaunchPlan:
    config_path = f"{ctx.state_dir}/attempt-{ctx.binding.attempt}.trainer-args.yaml"
    content = yaml.safe_dump(trainer_args(ctx), sort_keys=True)
    entry = f"{ctx.exp_dir}/{ctx.method.entrypoint.file}"
    env = {**ctx.env, "FORGE_CONFIG": config_path}
    files = {config_path: content}
    if ctx.binding.world_size > 1 and ctx.method.entrypoint.launcher == "torchrun":
        torchrun = [sys.executable, "-m", "torch.distributed.run"]
        argv = torchrun_argv(ctx.binding, torchrun, entry)
        return LaunchPlan(argv=argv, cwd=ctx.exp_dir, env=env, files=files, launcher="torchrun")
    return LaunchPlan(argv=[sys.executable, entry], cwd=ctx.exp_dir, env=env, files=files)
