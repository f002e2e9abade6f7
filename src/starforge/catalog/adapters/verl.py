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

from starforge.catalog.adapters.base import (
    CompileContext,
    LaunchPlan,
    platform_config,
    torchrun_argv,
)
from starforge.contract.config import flatten, get_path, set_path
from starforge.contract.env import Binding
from starforge.contract.errors import ProfileError
from starforge.contract.profiles import Pool

PYTHON = "python3"
# A string Hydra reads back as the same string without quotes (no grammar characters).
_PLAIN = re.compile(r"^[A-Za-z0-9_./][A-Za-z0-9_./@+-]*$")
# Unquoted text Hydra would read as a number, a bool or null rather than a string.
_NOT_A_STRING = re.compile(
    r"^([+-]?(\d[\d_]*)?\.?\d*([eE][+-]?\d+)?|true|false|null|[+-]?inf|nan)$", re.IGNORECASE
)

# Node 0 of a multi-node Ray job: $1 = GCS port, $2 = node count, $3 = the wait snippet, $4 = the
# file that carries the driver's exit code to the other nodes; the rest is the driver command.
# The driver runs as a child (a SIGTERM to this script is passed on to it) so that, whatever its
# end, its exit code is written first and the Ray cluster is stopped after it.
_RAY_HEAD = """\
port=$1 nodes=$2 wait=$3 marker=$4
shift 4
driver= stopping=
trap 'stopping=1; [ -z "$driver" ] || kill -TERM "$driver" 2>/dev/null' TERM INT HUP
@RAY@ start --head --port="$port" --disable-usage-stats && @PYTHON@ -c "$wait" "$nodes"
code=$?
if [ "$code" = 0 ] && [ -z "$stopping" ]; then
    "$@" &
    driver=$!
    wait "$driver"; code=$?
    while kill -0 "$driver" 2>/dev/null; do wait "$driver"; code=$?; done
elif [ -n "$stopping" ]; then
    code=143
fi
mkdir -p "${marker%/*}" && echo "$code" > "$marker.tmp" && mv -f "$marker.tmp" "$marker"
@RAY@ stop
exit "$code"
"""
# Every other node: $1 = the head's address, $2 = the driver's exit-code file. ``ray start
# --block`` exits 1 when the head goes away, even after a driver that succeeded, so the node's
# exit is the driver's: once the file appears the node stops its own Ray (and ends ``--block``,
# which outlives Ray's processes when they end by SIGTERM) and exits with the code in it. Ray
# ending without that word (the head died, the network went) is a failure. The file is written
# before the head stops Ray, but a shared filesystem that caches file attributes may show it a
# little later: a node whose Ray ended looks for it for up to a minute
# ($STARFORGE_DRIVER_EXIT_GRACE_S), unless it was told to stop.
_RAY_WORKER = """\
address=$1 marker=$2 grace=${STARFORGE_DRIVER_EXIT_GRACE_S:-60}
ray= stopping=
trap 'stopping=1; [ -z "$ray" ] || kill -TERM "$ray" 2>/dev/null' TERM INT HUP
@RAY@ start --address="$address" --disable-usage-stats --block &
ray=$!
while [ ! -f "$marker" ] && kill -0 "$ray" 2>/dev/null; do sleep 2; done
waited=0
while [ -z "$stopping" ] && [ ! -f "$marker" ] && [ "$waited" -lt "$grace" ]; do
    sleep 1; waited=$((waited + 1))
done
if [ -f "$marker" ]; then
    @RAY@ stop
    kill -TERM "$ray" 2>/dev/null
    wait "$ray"
    read -r code < "$marker"
    exit "${code:-1}"
fi
wait "$ray"; code=$?
[ "$code" = 0 ] && code=1
exit "$code"
"""
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
# Under the run's out dir (the one folder every node shares and the job may write), per attempt.
DRIVER_EXIT = ".starforge/attempt-{attempt}.ray-driver-exit"


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


def driver_exit_file(b: Binding) -> str:
    """Where node 0 leaves the driver's exit code for the other nodes of a Ray-driven job."""
    return f"{b.out_dir}/{DRIVER_EXIT.format(attempt=b.attempt)}"


def _script(template: str, ray: Sequence[str], python: Sequence[str]) -> str:
    return template.replace("@RAY@", " ".join(ray)).replace("@PYTHON@", " ".join(python))


def ray_cluster_argv(
    b: Binding, driver: list[str], ray: Sequence[str] = ("ray",), python: Sequence[str] = (PYTHON,)
) -> tuple[list[str], dict[str, str]]:
    """The command of this node of a Ray-driven job, and the environment it adds.

    Node 0 starts the head, waits for every node, runs the driver, records its exit code and
    stops Ray; the others join and exit with the driver's code (:data:`_RAY_WORKER`)."""
    if b.nnodes <= 1:
        return driver, {}
    address = f"{b.master_addr}:{b.master_port}"
    marker = driver_exit_file(b)
    # bash -c SCRIPT NAME ARGS...: the arguments stay separate words, so nothing is re-quoted.
    if b.node_rank > 0:
        script = _script(_RAY_WORKER, ray, python)
        return ["bash", "-c", script, "starforge-ray-worker", address, marker], {}
    script = _script(_RAY_HEAD, ray, python)
    head = ["bash", "-c", script, "starforge-ray-head", str(b.master_port), str(b.nnodes)]
    return [*head, _WAIT_FOR_NODES, marker, *driver], {"RAY_ADDRESS": address}


SEPARATE_ASYNC = "separate_async"


def _label(pool: Pool) -> str:
    return f"{','.join(pool.roles) or pool.name}={pool.profile}:{pool.total_gpus}"


def rollout_pool(pools: list[Pool], config: dict[str, Any]) -> tuple[Pool, Pool] | None:
    """The (trainer, rollout) pools of a profile that gives the rollout nodes of its own.

    None for one pool (verl's hybrid engine: actor, rollout and reference take turns on every
    GPU). Several pools are verl 0.9.1's disaggregated rollout, which only its asynchronous
    ``separate_async`` trainer runs: actor and reference on the trainer pool, vLLM on the
    rollout pool. Anything else is refused with the reason (:class:`ProfileError`)."""
    if len(pools) <= 1:
        return None
    given = " ".join(f"--profile {_label(p)}" for p in pools)
    trainer = next((p for p in pools if "actor" in p.roles), None)
    rollout = next((p for p in pools if "rollout" in p.roles), None)
    if trainer is None or rollout is None or rollout is trainer or len(pools) != 2:
        raise ProfileError(
            f"{given}: verl runs on one pool, or on two where the rollout has a pool of its own "
            "(actor and reference on the other)",
            hint="e.g. --profile actor,reference=h200:8 --profile rollout=h100:2, or one --profile",
            details={"pools": [_label(p) for p in pools]},
        )
    if "reference" not in trainer.roles:
        raise ProfileError(
            f"{given}: verl places the reference model with the actor, on the trainer's GPUs",
            hint=f"name both on one pool: --profile actor,reference={trainer.profile}:"
            f"{trainer.total_gpus}",
            details={"pools": [_label(p) for p in pools]},
        )
    mode = get_path(config, "trainer.v1.trainer_mode")
    if mode != SEPARATE_ASYNC or get_path(config, "trainer.use_v1") is False:
        raise ProfileError(
            f"{given}: a rollout pool of its own runs only with verl's asynchronous trainer "
            f"(trainer.v1.trainer_mode is {mode if isinstance(mode, str) else 'sync'}); verl's "
            "default trainer colocates rollout with the actor on one pool",
            hint=f"set trainer.v1.trainer_mode: {SEPARATE_ASYNC} in the experiment's config "
            "(the rollout then lags the actor by up to trainer.v1.separate_async."
            "parameter_sync_step steps), or submit with one --profile",
            details={"pools": [_label(p) for p in pools]},
        )
    return trainer, rollout


def _topology(config: dict[str, Any], b: Binding) -> None:
    """Write each pool's own shape where the rollout has a pool of its own."""
    split = rollout_pool(b.pools, config)
    if split is None:
        return
    trainer, rollout = split
    set_path(config, "trainer.nnodes", trainer.nodes)
    set_path(config, "trainer.n_gpus_per_node", trainer.gpus_per_node)
    set_path(config, "actor_rollout_ref.hybrid_engine", False)
    set_path(config, "actor_rollout_ref.rollout.nnodes", rollout.nodes)
    set_path(config, "actor_rollout_ref.rollout.n_gpus_per_node", rollout.gpus_per_node)


def compile(ctx: CompileContext) -> LaunchPlan:
    b, entry = ctx.binding, ctx.method.entrypoint
    config = platform_config(ctx)
    set_path(config, "trainer.project_name", ctx.spec.project)
    set_path(config, "trainer.experiment_name", f"{ctx.spec.experiment}-{b.run_id}")
    if entry.launcher != "torchrun":
        _topology(config, b)
    if b.resume_from:  # otherwise verl resumes from the newest checkpoint in its output dir
        set_path(config, "trainer.resume_mode", "resume_path")
        set_path(config, "trainer.resume_from_path", b.resume_from)
    args = overrides(config)
    env = dict(ctx.env)
    if entry.launcher == "torchrun":
        argv = torchrun_argv(b, ["torchrun"], "-m", entry.module, *args)
        return LaunchPlan(argv=argv, cwd=ctx.exp_dir, env=env, launcher="torchrun")
    argv, added = ray_cluster_argv(b, [PYTHON, "-m", entry.module, *args])
    env.update(added)
    return LaunchPlan(argv=argv, cwd=ctx.exp_dir, env=env)
