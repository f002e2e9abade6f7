"""NeMo-RL: the resolved config as one YAML file, run by an upstream example script.

Upstream launches ``uv run python examples/run_grpo.py --config FILE [KEY=VALUE ...]`` from its
checkout (``$NEMO_RL_DIR``, ``/opt/nemo-rl`` in the NeMo-RL container). The platform config
(experiment config composed from its ``defaults`` chain, parameters applied, checkpoint dir,
topology and model written by :func:`platform_config`, log dir added here) is written to
``<run>/state/attempt-N.nemo-rl-config.yaml`` and passed with ``--config``; no override is needed
on the command line, since the file already carries the platform's keys.

The file's own ``defaults:`` names the method's upstream example config inside the checkout
(e.g. ``examples/configs/grpo_math_1B.yaml``). NeMo-RL's loader merges the file over it, so a
key the lab's configs leave out takes the default of the exact NeMo-RL version in the image,
and NeMo-RL's config validation (every required key present) holds with a lab base that is only
a subset of upstream's. NeMo-RL is Ray-driven: with several nodes, node 0 starts the Ray head
and waits for the others, which join it (:func:`~starforge.catalog.adapters.verl.ray_cluster_argv`);
NeMo-RL attaches to an externally started cluster. Only node 0 writes the config file: the
driver runs there, and the other nodes only lend their GPUs to Ray.

NeMo-RL describes its cluster as ``cluster.num_nodes`` nodes of ``cluster.gpus_per_node`` GPUs
each, so a run has one pool of equal nodes; a profile of several pools is refused
(:func:`one_pool`, also a check at submit).
"""

from __future__ import annotations

import yaml

from starforge.catalog.adapters.base import CompileContext, LaunchPlan, platform_config
from starforge.catalog.adapters.verl import ray_cluster_argv
from starforge.contract.config import set_path
from starforge.contract.errors import ProfileError
from starforge.contract.profiles import Pool

DEFAULT_DIR = "/opt/nemo-rl"
# The upstream config each method's experiments build on, relative to the NeMo-RL checkout.
UPSTREAM_CONFIG = {
    "nemo-rl/grpo": "examples/configs/grpo_math_1B.yaml",
    "nemo-rl/sft": "examples/configs/sft.yaml",
}
UV_RUN = ("uv", "run")


def one_pool(method_id: str, pools: list[Pool]) -> None:
    """Refuse pools NeMo-RL cannot describe: its cluster is N nodes of G GPUs each."""
    if len(pools) <= 1:
        return
    given = " ".join(
        f"--profile {','.join(p.roles) or p.name}={p.profile}:{p.total_gpus}" for p in pools
    )
    raise ProfileError(
        f"{method_id}: {given}: NeMo-RL 0.7 runs on one Ray cluster of equal nodes "
        "(cluster.num_nodes x cluster.gpus_per_node), so it cannot be given pools of their own",
        hint="submit with one --profile (e.g. h200:16); to keep GPUs for generation, set "
        "policy.generation.colocated.enabled: false and policy.generation.colocated.resources "
        "in the experiment's config",
        details={"pools": [p.name for p in pools]},
    )


def config_file(ctx: CompileContext, nemo_dir: str) -> str:
    """The YAML handed to ``--config``: upstream defaults, then the run's platform config."""
    b = ctx.binding
    config = platform_config(ctx)
    set_path(config, "logger.log_dir", f"{b.out_dir}/logs")
    base = UPSTREAM_CONFIG.get(ctx.method.id)
    document = {"defaults": f"{nemo_dir}/{base}", **config} if base else config
    header = (
        f"# {ctx.method.id}, run {b.run_id}, attempt {b.attempt}: written by StarForge.\n"
        "# Edit the experiment's config.yaml, not this file.\n"
    )
    return header + yaml.safe_dump(document, sort_keys=False, default_flow_style=False)


def compile(ctx: CompileContext) -> LaunchPlan:
    one_pool(ctx.method.id, ctx.binding.pools)
    nemo_dir = ctx.env.get("NEMO_RL_DIR") or DEFAULT_DIR
    path = f"{ctx.state_dir}/attempt-{ctx.binding.attempt}.nemo-rl-config.yaml"
    script = f"{nemo_dir}/{ctx.method.entrypoint.file}"
    driver = [*UV_RUN, "python", script, "--config", path]
    argv, added = ray_cluster_argv(
        ctx.binding, driver, ray=(*UV_RUN, "ray"), python=(*UV_RUN, "python")
    )
    env = {**ctx.env, "NEMO_RL_DIR": nemo_dir, **added}
    files = {path: config_file(ctx, nemo_dir)} if ctx.binding.node_rank == 0 else {}
    return LaunchPlan(argv=argv, cwd=nemo_dir, env=env, files=files)
