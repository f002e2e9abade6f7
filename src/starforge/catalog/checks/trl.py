"""TRL's rules. GRPO samples ``num_generations`` completions per prompt, so the batch generated
at once (per-device batch x processes x steps per generation) must be a whole number of groups.
The processes are the run's world size: nodes x processes per node (one per GPU, or the
server's ``cpu_processes_per_node`` when jobs run on the CPU), as the profile resolved."""

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
    # Every node runs one process per GPU (or the server's CPU processes): the world size. With
    # the profile unknown (sf validate), one process.
    processes, how = ctx.processes() or (1, "")
    world = f"processes ({processes}: {how})" if how else "processes (1 without a profile)"
    batch = per_device * processes * steps_per_gen
    if generations and batch % generations:
        problems.append(
            f"per_device_train_batch_size ({per_device}) x {world} x "
            f"steps_per_generation ({steps_per_gen}) = {batch} must be divisible by "
            f"num_generations ({generations})"
        )
    eval_on = ctx.value("eval_strategy") not in (None, "no")
    per_device_eval = _int(ctx.value("per_device_eval_batch_size"), 8)
    eval_batch = per_device_eval * processes
    if eval_on and generations and eval_batch % generations:
        problems.append(
            f"per_device_eval_batch_size ({per_device_eval}) x {world} = {eval_batch} must be "
            f"divisible by num_generations ({generations})"
        )
    return problems


CHECKS = {"trl_grpo_batch": grpo_batch}
