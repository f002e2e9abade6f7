"""NeMo-RL's batch rules (NeMo-RL 0.7.0), checked before a GPU is touched.

A policy ``train()`` call cuts the samples it gets into global batches of
``policy.train_global_batch_size`` (the remainder is dropped), hands each data-parallel rank
``global // dp`` of them and cuts those into micro-batches of ``policy.train_micro_batch_size``.
The data-parallel size is the training GPUs divided by the model-parallel sizes (DTensor:
tensor x context parallel; Megatron: tensor x pipeline x context parallel). With colocated
generation (the default) the policy trains on every GPU of the cluster; otherwise generation
keeps ``policy.generation.colocated.resources`` for itself.

GRPO trains once per step on ``num_prompts_per_step x num_generations_per_prompt`` samples;
``loss_fn.force_on_policy_ratio`` requires exactly one global batch per step
(``nemo_rl/algorithms/grpo.py``). SFT trains on ``train_global_batch_size`` samples per step
and validates with ``sft.val_global_batch_size`` / ``sft.val_micro_batch_size``.

Pools: NeMo-RL's cluster is ``cluster.num_nodes`` nodes of ``cluster.gpus_per_node`` GPUs each
(one Ray virtual cluster of equal nodes), so a profile of several pools is refused at submit with
the reason (:func:`~starforge.catalog.adapters.nemo_rl.one_pool`, a ``ProfileError`` raised
through ``run_checks``; the adapter refuses it too).
"""

from __future__ import annotations

from starforge.catalog.adapters.nemo_rl import one_pool
from starforge.catalog.checks.context import CheckContext

GBS = "policy.train_global_batch_size"
MBS = "policy.train_micro_batch_size"


def _int(ctx: CheckContext, key: str) -> int | None:
    value = ctx.value(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _model_parallel(ctx: CheckContext) -> tuple[int, str]:
    if ctx.value("policy.megatron_cfg.enabled") is True:
        prefix, names = (
            "policy.megatron_cfg",
            ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size"),
        )
    else:
        prefix, names = "policy.dtensor_cfg", ("tensor_parallel_size", "context_parallel_size")
    size = 1
    for name in names:
        size *= max(_int(ctx, f"{prefix}.{name}") or 1, 1)
    return size, " x ".join(f"{prefix}.{name}" for name in names)


def _training_gpus(ctx: CheckContext, role: str) -> int | None:
    gpus = ctx.gpus(role)
    if gpus is None or ctx.value("policy.generation.colocated.enabled") is not False:
        return gpus
    if ctx.pools and len(ctx.pools) > 1:
        return gpus  # generation has a pool of its own
    nodes = sum(p.nodes for p in ctx.pools or [])
    per_node = gpus // max(nodes, 1)
    if nodes > 1:
        taken = (_int(ctx, "policy.generation.colocated.resources.num_nodes") or 0) * per_node
    else:
        taken = _int(ctx, "policy.generation.colocated.resources.gpus_per_node") or 0
    return gpus - taken


def data_parallel(ctx: CheckContext, role: str) -> tuple[int, str] | None:
    """The policy's data-parallel size and how it was computed, when the profile is known."""
    gpus = _training_gpus(ctx, role)
    if gpus is None:
        return None
    mp, names = _model_parallel(ctx)
    return max(gpus // mp, 1), f"{gpus} training GPUs / {names} ({mp})"


def _micro_rule(ctx: CheckContext, role: str, gbs_key: str, mbs_key: str) -> list[str]:
    gbs, mbs = _int(ctx, gbs_key), _int(ctx, mbs_key)
    dp = data_parallel(ctx, role)
    if not gbs or not mbs or dp is None:
        return []
    size, how = dp
    if gbs % (mbs * size):
        return [
            f"{gbs_key} ({gbs}) must be divisible by {mbs_key} ({mbs}) x data-parallel "
            f"size ({size} = {how}) = {mbs * size}"
        ]
    return []


def pools(ctx: CheckContext) -> list[str]:
    """A profile NeMo-RL cannot describe is refused here (raises), before a byte is uploaded."""
    if ctx.pools is not None:
        one_pool(ctx.method.id, ctx.pools)
    return []


def grpo_batch(ctx: CheckContext) -> list[str]:
    problems: list[str] = []
    prompts = _int(ctx, "grpo.num_prompts_per_step")
    generations = _int(ctx, "grpo.num_generations_per_prompt")
    gbs = _int(ctx, GBS)
    if prompts and generations and gbs:
        samples = prompts * generations
        what = (
            f"grpo.num_prompts_per_step ({prompts}) x grpo.num_generations_per_prompt "
            f"({generations}) = {samples}"
        )
        if ctx.value("loss_fn.force_on_policy_ratio") is True and samples != gbs:
            problems.append(
                f"{what} must equal {GBS} ({gbs}) when "
                "loss_fn.force_on_policy_ratio is true (one update per step)"
            )
        elif samples % gbs:
            problems.append(
                f"{what} must be divisible by {GBS} ({gbs}): a partial global batch is dropped"
            )
    return problems + _micro_rule(ctx, "policy", GBS, MBS)


def validation(ctx: CheckContext) -> list[str]:
    batch = _int(ctx, "grpo.val_batch_size")
    samples = _int(ctx, "grpo.max_val_samples")
    if batch and samples and batch > samples:
        return [
            f"grpo.val_batch_size ({batch}) must be <= grpo.max_val_samples ({samples}): "
            "validation runs max_val_samples // val_batch_size batches"
        ]
    return []


def sft_batch(ctx: CheckContext) -> list[str]:
    return _micro_rule(ctx, "trainer", GBS, MBS) + _micro_rule(
        ctx, "trainer", "sft.val_global_batch_size", "sft.val_micro_batch_size"
    )


CHECKS = {
    "nemo_rl_pools": pools,
    "nemo_rl_grpo_batch": grpo_batch,
    "nemo_rl_validation": validation,
    "nemo_rl_sft_batch": sft_batch,
}
