"""Golden launch plans of a trl run on several processes: torchrun per node, one training."""

from __future__ import annotations

import sys

import pytest
import yaml

from starforge.catalog.adapters import CompileContext, compile_plan
from starforge.catalog.adapters.base import run_config
from starforge.catalog.checks import CheckContext, run_checks
from starforge.catalog.loader import get_method
from starforge.contract import params
from starforge.contract.env import job_env, make_binding
from starforge.contract.errors import BatchValidation, ParamError
from starforge.contract.jobspec import InputKind, InputRef, Inputs, JobSpec, Provenance
from starforge.contract.profiles import Pool, ProfileDef, parse_profile_args, resolve

RUN = "/s/runs/ada/lab/e1/r-0123456789"
WORK = f"{RUN}/work"
ENTRY = f"{WORK}/experiments/e1/train.py"
TORCHRUN = [
    "sh",
    "-c",
    'trap "" TERM; exec "$@"',
    "torchrun",
    sys.executable,
    "-m",
    "torch.distributed.run",
]


def pools_of(profile: str, *, cpu_processes: int | None) -> list[Pool]:
    registry = [ProfileDef(name="h200", series="h200", gpus_per_node=8, nodes=1)]
    if cpu_processes is not None:  # a server whose jobs run on the CPU publishes its count
        registry = [p.model_copy(update={"processes_per_node": cpu_processes}) for p in registry]
    return resolve(parse_profile_args([profile]), registry, ["trainer"])


def plan_of(
    pools: list[Pool], node_rank: int, hyperparams: dict[str, object] | None = None
) -> tuple[list[str], dict[str, object]]:
    method = get_method("trl/sft")
    spec = JobSpec(
        project="lab",
        experiment="e1",
        method=method.ref(),
        profiles=["h200"],
        inputs=Inputs(model=InputRef(kind=InputKind.PACKAGE, value="models/m")),
        hyperparams=hyperparams or {},
        provenance=Provenance(git_commit="c" * 40, client_version="0.1.0"),
    )
    binding = make_binding(
        run_id="r-0123456789",
        attempt=1,
        user="ada",
        storage_root="/s",
        run_dir=RUN,
        log_path=f"{RUN}/logs/attempt-1.log",
        pools=pools,
        pool=pools[0].name,
        node_rank=node_rank,
        nnodes=sum(p.nodes for p in pools),
        visible_devices=list(range(pools[0].gpus_per_node)),
        master_port=29511,
        master_addr="10.0.0.1",
        endpoint="http://127.0.0.1:9",
        run_token="t",
        hf_offline=True,
    )
    config = run_config(spec, method, {"experiments/e1/config.yaml": "max_steps: 5\n"}.get)
    ctx = CompileContext(
        spec=spec, method=method, binding=binding, env=job_env(spec, binding), config=config
    )
    plan = compile_plan(ctx)
    [content] = plan.files.values()
    assert plan.env["NPROC_PER_NODE"] == str(binding.procs_per_node)
    return plan.argv, yaml.safe_load(content)


def test_one_process_runs_train_py_itself() -> None:
    argv, _ = plan_of(pools_of("h200:1", cpu_processes=None), 0)
    assert argv == [sys.executable, ENTRY]


def test_two_gpu_nodes_run_torchrun_on_each_with_its_rank_and_a_process_per_gpu() -> None:
    pools = pools_of("h200:16", cpu_processes=None)
    for rank in (0, 1):
        argv, _ = plan_of(pools, rank)
        assert argv == [
            *TORCHRUN,
            "--nnodes=2",
            f"--node_rank={rank}",
            "--nproc_per_node=8",
            "--master_addr=10.0.0.1",
            "--master_port=29511",
            "--signals_to_handle=SIGINT,SIGHUP,SIGQUIT",
            ENTRY,
        ]


def test_one_gpu_node_of_eight_runs_eight_processes_under_torchrun() -> None:
    argv, _ = plan_of(pools_of("h200:8", cpu_processes=None), 0)
    assert "--nnodes=1" in argv and "--nproc_per_node=8" in argv


def test_on_a_cpu_server_each_node_runs_its_configured_processes() -> None:
    one_each = pools_of("h200:16", cpu_processes=1)
    assert one_each[0].world_size == 2
    argv, _ = plan_of(one_each, 1)
    assert "--nproc_per_node=1" in argv and "--node_rank=1" in argv
    two = pools_of("h200:8", cpu_processes=2)
    argv, _ = plan_of(two, 0)
    assert "--nnodes=1" in argv and "--nproc_per_node=2" in argv
    # One node of one process is a plain run, no launcher.
    assert plan_of(pools_of("h200:1", cpu_processes=1), 0)[0] == [sys.executable, ENTRY]


@pytest.mark.parametrize(
    ("strategy", "added"),
    [
        ("ddp", {}),
        ("fsdp", {"fsdp": "full_shard auto_wrap"}),
        ("zero3", {"deepspeed": {"zero_optimization": {"stage": 3}}}),
    ],
)
def test_the_strategy_key_becomes_the_trainers_own_arguments(
    strategy: str, added: dict[str, object]
) -> None:
    _, args = plan_of(pools_of("h200:16", cpu_processes=None), 0, {"strategy": strategy})
    assert "starforge" not in args  # the platform's section is never a trainer argument
    for key, value in added.items():
        if isinstance(value, dict):
            assert args[key]["zero_optimization"] == value["zero_optimization"]  # type: ignore[index]
        else:
            assert args[key] == value
    if not added:
        assert "fsdp" not in args and "deepspeed" not in args


def test_an_unknown_strategy_is_refused_like_any_parameter() -> None:
    method = get_method("trl/sft")
    with pytest.raises(ParamError, match="strategy"):
        params.resolve(method.params, {}, ["strategy=zero4"], config_name="config.yaml")


def test_grpo_batch_check_counts_every_process_of_every_node() -> None:
    method = get_method("trl/grpo")
    config = {"per_device_train_batch_size": 3, "num_generations": 4}
    run_checks(CheckContext(method, config, pools_of("h200:8", cpu_processes=4)))  # 12: fine
    with pytest.raises(BatchValidation) as err:
        run_checks(CheckContext(method, config, pools_of("h200:16", cpu_processes=1)))
    assert (
        "per_device_train_batch_size (3) x processes (2: 2 node(s) x 1 per node) x "
        "steps_per_generation (1) = 6 must be divisible by num_generations (4)"
    ) in err.value.message
    with pytest.raises(BatchValidation, match=r"processes \(16: 2 node\(s\) x 8 per node\)"):
        bad = {**config, "num_generations": 5}
        run_checks(CheckContext(method, bad, pools_of("h200:16", cpu_processes=None)))
