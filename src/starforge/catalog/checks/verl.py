"""verl's batch rules (verl 0.9.1), checked before a GPU is touched.

GRPO (``verl.trainer.main_ppo``): each step generates ``data.train_batch_size`` prompts x
``rollout.n`` responses. The actor updates on mini-batches of ``ppo_mini_batch_size`` prompts,
normalised upstream to ``ppo_mini_batch_size x rollout.n`` samples, split evenly over the
data-parallel ranks (``verl/workers/engine_workers.py``: ``mini_batch_size % dp == 0``) and then
into micro-batches of ``ppo_micro_batch_size_per_gpu`` (``verl/workers/engine/utils.py``). The
data-parallel size is the actor's GPUs divided by the Ulysses sequence-parallel size. With
``use_dynamic_bsz`` the micro-batches are packed by tokens and the micro-batch rules do not apply.

Pools (``verl.trainer.main_ppo``): one pool, or a rollout pool of its own with verl's
asynchronous ``separate_async`` trainer (:func:`~starforge.catalog.adapters.verl.rollout_pool`,
which the adapter compiles): any other profile is refused at submit with the reason, as a
:class:`~starforge.contract.errors.ProfileError` raised through ``run_checks``.

SFT (``verl.trainer.sft_trainer``): each rank takes ``train_batch_size // dp`` samples and,
without ``use_dynamic_bsz``, splits them into micro-batches of ``micro_batch_size_per_gpu``.
"""

from __future__ import annotations

from starforge.catalog.adapters.verl import rollout_pool
from starforge.catalog.checks.context import CheckContext

ACTOR = "actor_rollout_ref.actor"
ROLLOUT = "actor_rollout_ref.rollout"
# Estimators whose baseline comes from the other responses to the same prompt
# (verl/trainer/ppo/core_algos.py): a group of one has nothing to compare with.
GROUP_ESTIMATORS = frozenset(
    {
        "grpo",
        "grpo_vectorized",
        "gdpo",
        "grpo_passk",
        "rloo",
        "rloo_vectorized",
        "opo",
        "gpg",
        "reinforce_plus_plus_baseline",
        "optimal_token_baseline",
        "tir_optimal_token_baseline",
    }
)


def _int(ctx: CheckContext, key: str) -> int | None:
    value = ctx.value(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _dp(ctx: CheckContext, role: str, sp_keys: tuple[str, ...]) -> tuple[int, str] | None:
    """Data-parallel size of ``role`` and how it was computed, when the profile is known."""
    gpus = ctx.gpus(role)
    if gpus is None:
        return None
    sp = max([_int(ctx, k) or 1 for k in sp_keys] or [1])
    return max(gpus // sp, 1), f"{gpus} GPUs / sequence parallel {sp}"


def grpo_batch(ctx: CheckContext) -> list[str]:
    problems: list[str] = []
    train = _int(ctx, "data.train_batch_size")
    mini = _int(ctx, f"{ACTOR}.ppo_mini_batch_size")
    micro = _int(ctx, f"{ACTOR}.ppo_micro_batch_size_per_gpu")
    n = _int(ctx, f"{ROLLOUT}.n") or 1
    dynamic = ctx.value(f"{ACTOR}.use_dynamic_bsz") is True
    if train and mini and train % mini:
        problems.append(
            f"data.train_batch_size ({train}) must be divisible by "
            f"{ACTOR}.ppo_mini_batch_size ({mini}): every update takes whole mini-batches"
        )
    if not dynamic and micro is None:
        problems.append(
            f"{ACTOR}.ppo_micro_batch_size_per_gpu must be set when {ACTOR}.use_dynamic_bsz is "
            "false (upstream's default is null)"
        )
    dp = _dp(
        ctx,
        "actor",
        (
            f"{ACTOR}.ulysses_sequence_parallel_size",
            f"{ACTOR}.fsdp_config.ulysses_sequence_parallel_size",
        ),
    )
    if not mini or dp is None:
        return problems
    size, how = dp
    samples = mini * n
    tokens_packed = dynamic or micro is None  # micro-batches are not counted in samples
    per_rank = 1 if tokens_packed else micro
    if samples % (per_rank * size):
        rule = (
            f"the data-parallel size ({size} = {how})"
            if tokens_packed
            else f"{ACTOR}.ppo_micro_batch_size_per_gpu ({micro}) x data-parallel size "
            f"({size} = {how}) = {micro * size}"
        )
        problems.append(
            f"{ACTOR}.ppo_mini_batch_size ({mini}) x {ROLLOUT}.n ({n}) = {samples} samples "
            f"must be divisible by {rule}"
        )
    gpus = ctx.gpus("actor") or size
    if train and not dynamic and (train * n) % gpus:
        problems.append(
            f"data.train_batch_size ({train}) x {ROLLOUT}.n ({n}) = {train * n} samples "
            f"must be divisible by the actor's GPUs ({gpus})"
        )
    return problems


def pools(ctx: CheckContext) -> list[str]:
    """A profile verl cannot run is refused here (raises), before a byte is uploaded."""
    if ctx.pools is not None:
        rollout_pool(ctx.pools, ctx.config)
    return []


def group_size(ctx: CheckContext) -> list[str]:
    estimator = ctx.value("algorithm.adv_estimator")
    n = _int(ctx, f"{ROLLOUT}.n")
    if estimator in GROUP_ESTIMATORS and n is not None and n < 2:
        return [
            f"{ROLLOUT}.n ({n}) must be >= 2 for algorithm.adv_estimator={estimator}: "
            "the advantage compares the responses to the same prompt"
        ]
    return []


def _positive(ctx: CheckContext, keys: tuple[str, ...]) -> list[str]:
    problems = []
    for key in keys:
        value = ctx.value(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value <= 0:
            problems.append(f"{key} ({value}) must be positive")
    return problems


def lengths(ctx: CheckContext) -> list[str]:
    return _positive(
        ctx,
        (
            "data.max_prompt_length",
            "data.max_response_length",
            "trainer.total_epochs",
            f"{ACTOR}.ppo_epochs",
        ),
    )


def sft_batch(ctx: CheckContext) -> list[str]:
    train = _int(ctx, "data.train_batch_size")
    micro = _int(ctx, "data.micro_batch_size_per_gpu")
    dp = _dp(ctx, "trainer", ("engine.ulysses_sequence_parallel_size",))
    if not train or dp is None:
        return []
    size, how = dp
    if ctx.value("data.use_dynamic_bsz") is not False:
        if train % size:
            return [
                f"data.train_batch_size ({train}) must be divisible by the data-parallel "
                f"size ({size} = {how}): each rank takes an equal share"
            ]
        return []
    if micro and train % (micro * size):
        return [
            f"data.train_batch_size ({train}) must be divisible by "
            f"data.micro_batch_size_per_gpu ({micro}) x data-parallel size "
            f"({size} = {how}) = {micro * size} when data.use_dynamic_bsz is false"
        ]
    return []


def sft_lengths(ctx: CheckContext) -> list[str]:
    return _positive(ctx, ("data.max_length", "data.max_token_len_per_gpu", "trainer.total_epochs"))


CHECKS = {
    "verl_grpo_batch": grpo_batch,
    "verl_group_size": group_size,
    "verl_lengths": lengths,
    "verl_pools": pools,
    "verl_sft_batch": sft_batch,
    "verl_sft_lengths": sft_lengths,
}
