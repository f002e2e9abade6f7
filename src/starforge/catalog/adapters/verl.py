"""verl: the run's config as Hydra ``KEY=VALUE`` overrides of an upstream entry module.

verl composes its config with Hydra from the YAML files inside the package (``ppo_trainer`` for
``verl.trainer.main_ppo``, ``sft_trainer_engine`` for ``verl.trainer.sft_trainer``), so nothing is
handed over as a file: the platform config (experiment config composed, parameters applied,
outputs / topology / inputs written by :func:`platform_config`, run names added here) is
flattened and every leaf becomes one override, in the config's order. The commands:

* launcher ``python`` (``verl/grpo``): ``python3 -m verl.trainer.main_ppo KEY=VALUE...``. verl
  drives its workers through Ray; on one node it starts Ray itself. With several nodes, node 0
  starts a Ray head on ``MASTER_ADDR:MASTER_PORT``, waits until every node has joined, then runs
  the trainer (``RAY_ADDRESS`` points it at the head); the other nodes join and block
  (:func:`ray_cluster_argv`, shared with NeMo-RL, which is Ray-driven the same way).
* launcher ``torchrun`` (``verl/sft``): ``torchrun --nnodes=N --nproc_per_node=G --node_rank=R
  --master_addr=A --master_port=P -m verl.trainer.sft_trainer KEY=VALUE...`` on every node, the
  way upstream's examples launch it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from starforge.catalog.adapters.base import CompileContext, LaunchPlan, platform_config
from starforge.contract.config import flatten, set_path
from starforge.contract.env import Binding

PYTHON = "python3"
# A string Hydra reads back as the same string without quotes (no grammar characters).
_PLAIN = re.compile(r"^[A-Za-z0-9_./][A-Za-z0-9_./@+-]*$")
# Unquoted text Hydra would read as a number, a bool or null rather than a string.
_NOT_A_STRING = re.compile(
    r"^([+-]?(\d[\d_]*)?\.?\d*([eE][+-]?\d+)?|true|false|null|[+-]?inf|nan)$", re.IGNORECASE
)

# Node 0 of a multi-node Ray job: $1 = GCS port, $2 = node count, $3 = the wait snippet,
# the rest is the driver command.
_RAY_HEAD = (
    '{ray} start --head --port="$1" --disable-usage-stats'
    ' && {python} -c "$3" "$2" && shift 3 && exec "$@"'
)
_WAIT_FOR_NODES = (
    "import sys, time, ray\n"
    "ray.init(address='auto')\n"
    "want, alive = int(sys.argv[1]), 0\n"
    "for _ in range(600):\n"
    "    alive = sum(1 for node in ray.nodes() if node['Alive'])\n"
    "    if alive >= want:\n"
    "        sys.exit(0)\n"
    "    time.sleep(1)\n"
    "sys.exit(f'ray: {alive} of {want} nodes joined within 600 s')\n"
)


def hydra_value(value: Any) -> str:
    """``value`` in Hydra's override grammar: true/false, null, [a,b], {k:v}, quoted if needed."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if _PLAIN.match(text) and not _NOT_A_STRING.match(text):
        return text
    # Hydra escapes only the backslashes before a quote (or the closing quote), and the quotes.
    escaped = re.sub(r"(\\+)(?='|$)", lambda m: m.group(1) * 2, text).replace("'", "\\'")
    return f"'{escaped}'"


def overrides(config: dict[str, Any]) -> list[str]:
    """Every leaf of ``config`` as one ``dotted.key=value`` override."""
    return [f"{key}={hydra_value(value)}" for key, value in flatten(config).items()]


def ray_cluster_argv(
    b: Binding, driver: list[str], ray: Sequence[str] = ("ray",), python: Sequence[str] = (PYTHON,)
) -> tuple[list[str], dict[str, str]]:
    """The command of this node of a Ray-driven job, and the environment it adds."""
    if b.nnodes <= 1:
        return driver, {}
    address = f"{b.master_addr}:{b.master_port}"
    if b.node_rank > 0:
        return [*ray, "start", f"--address={address}", "--disable-usage-stats", "--block"], {}
    script = _RAY_HEAD.format(ray=" ".join(ray), python=" ".join(python))
    # bash -c SCRIPT NAME ARGS...: the arguments stay separate words, so nothing is re-quoted.
    head = ["bash", "-c", script, "starforge-ray-head", str(b.master_port), str(b.nnodes)]
    return [*head, _WAIT_FOR_NODES, *driver], {"RAY_ADDRESS": address}


def compile(ctx: CompileContext) -> LaunchPlan:
    b, entry = ctx.binding, ctx.method.entrypoint
    config = platform_config(ctx)
    set_path(config, "trainer.project_name", ctx.spec.project)
    set_path(config, "trainer.experiment_name", f"{ctx.spec.experiment}-{b.run_id}")
    if b.resume_from:  # otherwise verl resumes from the newest checkpoint in its output dir
        set_path(config, "trainer.resume_mode", "resume_path")
        set_path(config, "trainer.resume_from_path", b.resume_from)
    args = overrides(config)
    env = dict(ctx.env)
    if entry.launcher == "torchrun":
        rendezvous = {
            "nnodes": b.nnodes,
            "nproc_per_node": b.gpus_per_node,
            "node_rank": b.node_rank,
            "master_addr": b.master_addr,
            "master_port": b.master_port,
        }
        flags = [f"--{name}={value}" for name, value in rendezvous.items()]
        argv = ["torchrun", *flags, "-m", entry.module, *args]
    else:
        argv, added = ray_cluster_argv(b, [PYTHON, "-m", entry.module, *args])
        env.update(added)
    return LaunchPlan(argv=argv, cwd=ctx.exp_dir, env=env)
