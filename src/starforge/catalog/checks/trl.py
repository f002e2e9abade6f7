"""TRL's rules. GRPO samples ``num_generations`` completions per prompt, so the batch generated
at once (per-device batch x processes x steps per generation) must be a whole number of groups."""

from __future__ import annotations

from starforge.catalog.checks.context import CheckContext


def _int(value: object, fallback: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else fallback


def grpo_batch(ctx: CheckContext) -> list[str]:
    problems = []
    per_device = _int(ctx.value("per_device_train_batch_size"), 8)
    accumulation = _int(ctx.value("gradient_accumulation_steps"), 1)
    steps_per_gen = _int(ctx.value("steps_per_generation"), accumulation)
    generations = _int(ctx.value("num_generations"), 8)
    # A CPU run is one process whatever the profile says; on GPUs, one process per GPU.
    processes = 1 if ctx.value("use_cpu") is True else (ctx.gpus() or 1)
    batch = per_device * processes * steps_per_gen
    if generations and batch % generations:
        problems.append(
            f"per_device_train_batch_size ({per_device}) x processes ({processes}) x "
            f"steps_per_generation ({steps_per_gen}) = {batch} must be divisible by "
            f"num_generations ({generations})"
        )
    eval_on = ctx.value("eval_strategy") not in (None, "no")
    eval_batch = _int(ctx.value("per_device_eval_batch_size"), 8) * processes
    if eval_on and generations and eval_batch % generations:
        problems.append(
            f"per_device_eval_batch_size x processes = {eval_batch} must be divisible by "
            f"num_generations ({generations})"
        )
    return problems


CHECKS = {"trl_grpo_batch": grpo_batch}
