"""verl/grpo and verl/sft: declarations, templates, the launch plans they compile, their checks.

verl needs GPUs, so nothing here runs it: the declarations load, the templates compose as
``sf new`` lays them out, every parameter resolves, the compiled commands are pinned by goldens
(2 nodes x 8 GPUs, fixed paths, run r-0123456789) and the batch rules accept and refuse what
verl 0.9.1 accepts and refuses.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from starforge.catalog.adapters import CompileContext, LaunchPlan, compile_plan
from starforge.catalog.adapters.base import run_config
from starforge.catalog.adapters.verl import hydra_value, overrides, ray_cluster_argv
from starforge.catalog.checks import CheckContext, run_checks
from starforge.catalog.checks import verl as checks
from starforge.catalog.loader import CATALOG_ROOT, Method, load_file
from starforge.contract import params
from starforge.contract.config import MISSING, compose, get_path, set_path
from starforge.contract.env import job_env
from starforge.contract.errors import BatchValidation, ProfileError
from starforge.contract.jobspec import InputKind, InputRef, Inputs, JobSpec, Provenance
from starforge.contract.profiles import Pool
from tests.catalog.compile_harness import RUN_DIR, WORK_DIR, binding, lay_out, reader

METHODS = ["verl/grpo", "verl/sft"]
ACTOR = "actor_rollout_ref.actor"


def method(method_id: str) -> Method:
    return load_file(CATALOG_ROOT / method_id / "method.yaml")


def spec_for(m: Method, root: Path, sets: list[str] | None = None) -> JobSpec:
    composed = compose("experiments/demo/config.yaml", reader(root))
    return JobSpec(
        project="lab",
        experiment="demo",
        method=m.ref(),
        profiles=["h200:16"],
        inputs=Inputs(
            model=InputRef(kind=InputKind.SHARED, value="/mnt/models/Qwen2.5-3B-Instruct"),
            train_data=InputRef(kind=InputKind.PACKAGE, value="data/gsm8k/train.parquet"),
            validation_data=InputRef(kind=InputKind.PACKAGE, value="data/gsm8k/test.parquet"),
        ),
        hyperparams=params.resolve(m.params, composed, sets or []),  # what the client records
        provenance=Provenance(git_commit="0" * 40, client_version="test"),
    )


def compiled(
    method_id: str,
    tmp_path: Path,
    node_rank: int = 0,
    nnodes: int = 2,
    sets: list[str] | None = None,
    **extra: Any,
) -> LaunchPlan:
    """Compile the template's experiment the way the runner does."""
    m = method(method_id)
    root = lay_out(m, tmp_path / "lab")
    spec = spec_for(m, root, sets)
    b = binding(node_rank, nnodes, **extra)
    ctx = CompileContext(
        spec=spec,
        method=m,
        binding=b,
        env=job_env(spec, b),
        config=run_config(spec, m, reader(root)),
    )
    return compile_plan(ctx)


def pools(m: Method, nodes: int, gpus_per_node: int = 8) -> list[Pool]:
    return [
        Pool(
            name="all",
            profile="h200",
            series="h200",
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            roles=list(m.roles),
        )
    ]


# --- declarations and templates -----------------------------------------------------------


@pytest.mark.parametrize("method_id", METHODS)
def test_declaration_loads_with_known_checks_and_real_dotted_params(method_id: str) -> None:
    m = method(method_id)

    assert m.id == method_id and m.framework == "verl" and m.version == "0.9.1"
    assert m.runtime.versions["0.9.1"].packages[0] == "verl==0.9.1"
    assert m.config.mode == "hydra-overrides"
    assert set(m.checks) <= set(checks.CHECKS)
    assert 15 <= len(m.params) <= 30
    assert all(p.path == name for name, p in m.params.items())
    assert set(m.config.bindings.values()) | {m.config.output_dir} <= set(m.config.reserved)


@pytest.mark.parametrize("method_id", METHODS)
def test_template_composes_and_every_param_resolves(method_id: str, tmp_path: Path) -> None:
    m = method(method_id)
    root = lay_out(m, tmp_path)
    composed = compose("experiments/demo/config.yaml", reader(root))

    resolved = params.resolve(m.params, composed, [])

    assert set(resolved) >= {n for n, p in m.params.items() if p.default is not None}
    assert [k for k in m.config.reserved if get_path(composed, k) is not MISSING] == []
    assert (m.template_dir / "README.md").is_file()


@pytest.mark.parametrize("method_id", METHODS)
@pytest.mark.parametrize("nodes", [1, 2])
def test_template_passes_its_own_checks(method_id: str, nodes: int, tmp_path: Path) -> None:
    m = method(method_id)
    root = lay_out(m, tmp_path)
    config = run_config(spec_for(m, root), m, reader(root))

    run_checks(CheckContext(m, config, pools(m, nodes)))
    run_checks(CheckContext(m, config, None))


# --- the launch plans ----------------------------------------------------------------------

GRPO_OVERRIDES = [
    "algorithm.adv_estimator=grpo",
    "algorithm.use_kl_in_reward=false",
    "algorithm.norm_adv_by_std_in_grpo=true",
    "algorithm.kl_ctrl.kl_coef=0.001",
    "data.train_batch_size=256",
    "data.max_prompt_length=512",
    "data.max_response_length=1024",
    "data.filter_overlong_prompts=true",
    "data.truncation=error",
    f"data.train_files={WORK_DIR}/data/gsm8k/train.parquet",
    f"data.val_files={WORK_DIR}/data/gsm8k/test.parquet",
    "actor_rollout_ref.model.use_remove_padding=true",
    "actor_rollout_ref.model.enable_gradient_checkpointing=true",
    "actor_rollout_ref.model.path=/mnt/models/Qwen2.5-3B-Instruct",
    "actor_rollout_ref.actor.optim.lr=1e-06",
    "actor_rollout_ref.actor.optim.weight_decay=0.01",
    "actor_rollout_ref.actor.ppo_mini_batch_size=64",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.actor.use_kl_loss=true",
    "actor_rollout_ref.actor.kl_loss_coef=0.001",
    "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
    "actor_rollout_ref.actor.entropy_coeff=0.0",
    "actor_rollout_ref.actor.use_dynamic_bsz=false",
    "actor_rollout_ref.actor.ppo_epochs=1",
    "actor_rollout_ref.actor.clip_ratio=0.2",
    "actor_rollout_ref.actor.loss_agg_mode=token-mean",
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size=1",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.n=5",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.6",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
    "actor_rollout_ref.rollout.temperature=1.0",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
    "trainer.logger=[console]",
    "trainer.total_epochs=15",
    "trainer.save_freq=20",
    "trainer.test_freq=5",
    "trainer.val_before_train=true",
    "trainer.critic_warmup=0",
    f"trainer.default_local_dir={RUN_DIR}/out/checkpoints",
    "trainer.nnodes=2",
    "trainer.n_gpus_per_node=8",
    "trainer.project_name=lab",
    "trainer.experiment_name=demo-r-0123456789",
]
DRIVER_EXIT = f"{RUN_DIR}/out/.starforge/attempt-1.ray-driver-exit"
RAY_HEAD_SCRIPT = """\
port=$1 nodes=$2 wait=$3 marker=$4
shift 4
driver= stopping=
trap 'stopping=1; [ -z "$driver" ] || kill -TERM "$driver" 2>/dev/null' TERM INT HUP
ray start --head --port="$port" --disable-usage-stats && python3 -c "$wait" "$nodes"
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
ray stop
exit "$code"
"""
RAY_WORKER_SCRIPT = """\
address=$1 marker=$2 grace=${STARFORGE_DRIVER_EXIT_GRACE_S:-60}
ray= stopping=
trap 'stopping=1; [ -z "$ray" ] || kill -TERM "$ray" 2>/dev/null' TERM INT HUP
ray start --address="$address" --disable-usage-stats --block &
ray=$!
while [ ! -f "$marker" ] && kill -0 "$ray" 2>/dev/null; do sleep 2; done
waited=0
while [ -z "$stopping" ] && [ ! -f "$marker" ] && [ "$waited" -lt "$grace" ]; do
    sleep 1; waited=$((waited + 1))
done
if [ -f "$marker" ]; then
    ray stop
    kill -TERM "$ray" 2>/dev/null
    wait "$ray"
    read -r code < "$marker"
    exit "${code:-1}"
fi
wait "$ray"; code=$?
[ "$code" = 0 ] && code=1
exit "$code"
"""


def test_grpo_node_0_starts_the_ray_head_runs_main_ppo_then_records_its_exit_and_stops_ray(
    tmp_path: Path,
) -> None:
    plan = compiled("verl/grpo", tmp_path, node_rank=0)

    assert plan.argv[:6] == ["bash", "-c", RAY_HEAD_SCRIPT, "starforge-ray-head", "29500", "2"]
    assert "ray.nodes()" in plan.argv[6]  # the wait-for-every-node snippet
    assert plan.argv[7] == DRIVER_EXIT
    assert plan.argv[8:] == ["python3", "-m", "verl.trainer.main_ppo", *GRPO_OVERRIDES]
    assert plan.cwd == f"{WORK_DIR}/experiments/demo"
    assert plan.env["RAY_ADDRESS"] == "10.0.0.1:29500"
    assert plan.env["FORGE_RUN_ID"] == "r-0123456789" and plan.files == {}


def test_grpo_other_nodes_join_the_ray_head_and_end_with_the_drivers_exit_code(
    tmp_path: Path,
) -> None:
    plan = compiled("verl/grpo", tmp_path, node_rank=1)

    assert plan.argv == [
        "bash",
        "-c",
        RAY_WORKER_SCRIPT,
        "starforge-ray-worker",
        "10.0.0.1:29500",
        DRIVER_EXIT,
    ]
    assert "RAY_ADDRESS" not in plan.env


def test_grpo_on_one_node_is_the_plain_upstream_command(tmp_path: Path) -> None:
    plan = compiled("verl/grpo", tmp_path, nnodes=1)

    expected = [o.replace("trainer.nnodes=2", "trainer.nnodes=1") for o in GRPO_OVERRIDES]
    assert plan.argv == ["python3", "-m", "verl.trainer.main_ppo", *expected]
    assert "RAY_ADDRESS" not in plan.env


def test_sft_runs_torchrun_on_every_node_with_its_rank(tmp_path: Path) -> None:
    plan = compiled("verl/sft", tmp_path, node_rank=1)

    assert plan.launcher == "torchrun"  # the runner hands SIGTERM to its ranks
    assert plan.argv == [
        "sh",
        "-c",
        'trap "" TERM; exec "$@"',
        "torchrun",
        "torchrun",
        "--nnodes=2",
        "--node_rank=1",
        "--nproc_per_node=8",
        "--master_addr=10.0.0.1",
        "--master_port=29500",
        "--signals_to_handle=SIGINT,SIGHUP,SIGQUIT",
        "-m",
        "verl.trainer.sft_trainer",
        "data.train_batch_size=128",
        "data.micro_batch_size_per_gpu=4",
        "data.use_dynamic_bsz=false",
        "data.max_length=2048",
        "data.truncation=right",
        "data.messages_key=messages",
        "data.max_token_len_per_gpu=8192",
        "data.pad_mode=no_padding",
        f"data.train_files={WORK_DIR}/data/gsm8k/train.parquet",
        f"data.val_files={WORK_DIR}/data/gsm8k/test.parquet",
        "optim.lr=1e-05",
        "optim.lr_warmup_steps_ratio=0.05",
        "optim.lr_scheduler_type=cosine",
        "optim.weight_decay=0.01",
        "optim.clip_grad=1.0",
        "model.enable_gradient_checkpointing=true",
        "model.use_remove_padding=true",
        "model.lora_rank=0",
        "model.lora_alpha=16",
        "model.path=/mnt/models/Qwen2.5-3B-Instruct",
        "trainer.logger=[console]",
        "trainer.total_epochs=2",
        "trainer.save_freq=200",
        "trainer.test_freq=100",
        "trainer.max_ckpt_to_keep=2",
        "trainer.seed=1",
        f"trainer.default_local_dir={RUN_DIR}/out/checkpoints",
        "trainer.nnodes=2",
        "trainer.n_gpus_per_node=8",
        "trainer.project_name=lab",
        "trainer.experiment_name=demo-r-0123456789",
        "engine.ulysses_sequence_parallel_size=1",
    ]
    assert plan.cwd == f"{WORK_DIR}/experiments/demo"


def test_a_set_overrides_the_config_and_a_resume_point_becomes_resume_path(
    tmp_path: Path,
) -> None:
    plan = compiled(
        "verl/grpo",
        tmp_path,
        nnodes=1,
        sets=["actor_rollout_ref.rollout.n=8"],
        resume_from="/mnt/sf/runs/ada/lab/old/out/checkpoints/global_step_40",
    )

    assert "actor_rollout_ref.rollout.n=8" in plan.argv
    assert "actor_rollout_ref.rollout.n=5" not in plan.argv
    assert plan.argv[-2:] == [
        "trainer.resume_mode=resume_path",
        "trainer.resume_from_path=/mnt/sf/runs/ada/lab/old/out/checkpoints/global_step_40",
    ]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (True, "true"),
        (False, "false"),
        (None, "null"),
        (3, "3"),
        (1e-6, "1e-06"),
        (["console", "wandb"], "[console,wandb]"),
        ({}, "{}"),
        ({"a": 1}, "{a:1}"),
        ("Qwen/Qwen3-4B", "Qwen/Qwen3-4B"),
        ("with space", "'with space'"),
        ("it's", "'it\\'s'"),
        ("007", "'007'"),
        ("true", "'true'"),
        ("1e-5", "'1e-5'"),
        ("~/data", "'~/data'"),
        ("a,b", "'a,b'"),
        ("${x.y}", "'${x.y}'"),
        ("", "''"),
        ("end\\", "'end\\\\'"),
    ],
)
def test_values_render_in_hydra_override_grammar(value: Any, text: str) -> None:
    assert hydra_value(value) == text


def test_rendered_values_parse_back_to_themselves_in_hydra() -> None:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    samples = ["it's", "007", "true", "a b", "end\\", "x,y", 1e-6, [1, "a b", None], {"k": "v"}]
    for sample in samples:
        assert parser.parse_override(f"k={hydra_value(sample)}").value() == sample
    assert overrides({"a": {"b": "x y", "c": {}}}) == ["a.b='x y'", "a.c={}"]


# scripts/setup.sh installs verl 0.9.1 here, without its dependencies and off sys.path.
VERL_HOME = Path(sys.prefix) / "share" / "starforge" / "verl-0.9.1"


def verl_configs() -> Path:
    """verl 0.9.1's own Hydra config folder (its wheel's ``verl/trainer/config``)."""
    found = VERL_HOME / "verl" / "trainer" / "config"
    assert found.is_dir(), f"verl's configs are missing at {found}: run scripts/setup.sh"
    version = method("verl/grpo").version  # the configs of the pinned version, no other
    assert (VERL_HOME / f"verl-{version}.dist-info").is_dir()
    return found


def compose_with_verl(config_name: str, args: list[str]) -> Any:
    """verl's own ``@hydra.main`` composition, strict: an unknown key raises."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(verl_configs()), version_base=None):
        return hydra_compose(config_name, overrides=args)


def hydra_args(plan: LaunchPlan, method_id: str) -> list[str]:
    return plan.argv[plan.argv.index(method(method_id).entrypoint.module) + 1 :]


@pytest.mark.parametrize(
    ("method_id", "config_name"),
    [("verl/grpo", "ppo_trainer"), ("verl/sft", "sft_trainer_engine")],
)
@pytest.mark.parametrize("nnodes", [1, 2])
def test_every_override_composes_against_verls_own_config(
    method_id: str, config_name: str, nnodes: int, tmp_path: Path
) -> None:
    plan = compiled(method_id, tmp_path, nnodes=nnodes)

    config = compose_with_verl(config_name, hydra_args(plan, method_id))

    assert config.trainer.default_local_dir == f"{RUN_DIR}/out/checkpoints"
    assert config.trainer.nnodes == nnodes and config.trainer.n_gpus_per_node == 8
    assert config.trainer.experiment_name == "demo-r-0123456789"


def test_verls_composition_is_strict_about_unknown_keys() -> None:
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException):
        compose_with_verl("ppo_trainer", ["trainer.no_such_key=1"])


# --- a rollout pool of its own ---------------------------------------------------------------

TRAINER_POOL = Pool(
    name="p0", profile="h200", series="h200", nodes=1, gpus_per_node=8, roles=["actor", "reference"]
)
ROLLOUT_POOL = Pool(
    name="p1", profile="h100", series="h100", nodes=1, gpus_per_node=2, roles=["rollout"]
)


def split_plan(tmp_path: Path, node_rank: int = 0, **config_keys: Any) -> LaunchPlan:
    """verl/grpo on ``--profile actor,reference=h200:8 --profile rollout=h100:2``."""
    m = method("verl/grpo")
    root = lay_out(m, tmp_path / "lab")
    spec = spec_for(m, root)
    b = binding(node_rank, 2, pools=[TRAINER_POOL, ROLLOUT_POOL], pool="p0")
    config = run_config(spec, m, reader(root))
    for key, value in config_keys.items():
        set_path(config, key.replace("__", "."), value)
    ctx = CompileContext(spec=spec, method=m, binding=b, env=job_env(spec, b), config=config)
    return compile_plan(ctx)


def test_a_rollout_pool_of_its_own_compiles_each_pools_shape_for_the_async_trainer(
    tmp_path: Path,
) -> None:
    plan = split_plan(tmp_path, trainer__v1__trainer_mode="separate_async")

    args = hydra_args(plan, "verl/grpo")
    assert "trainer.v1.trainer_mode=separate_async" in args
    given = dict(a.split("=", 1) for a in args)
    shape = ["trainer.nnodes", "trainer.n_gpus_per_node", "actor_rollout_ref.hybrid_engine"]
    shape += ["actor_rollout_ref.rollout.nnodes", "actor_rollout_ref.rollout.n_gpus_per_node"]
    assert [given[k] for k in shape] == ["1", "8", "false", "1", "2"]
    assert "actor_rollout_ref.hybrid_engine=false" in args
    assert plan.argv[5] == "2"  # the head waits for both pools' nodes to join one Ray cluster
    config = compose_with_verl("ppo_trainer", args)  # the keys are verl 0.9.1's
    assert config.actor_rollout_ref.rollout.n_gpus_per_node == 2
    assert config.actor_rollout_ref.hybrid_engine is False


def test_a_rollout_pool_of_its_own_with_the_default_trainer_is_refused_at_submit() -> None:
    config = grpo_config()

    with pytest.raises(ProfileError) as caught:
        run_checks(CheckContext(GRPO, config, [TRAINER_POOL, ROLLOUT_POOL]))

    assert "rollout=h100:2" in caught.value.message
    assert "only with verl's asynchronous trainer" in caught.value.message
    assert "trainer.v1.trainer_mode: separate_async" in (caught.value.hint or "")


def test_the_reference_away_from_the_actor_is_refused_with_the_reason() -> None:
    config = grpo_config(**{"trainer.v1.trainer_mode": "separate_async"})
    actor = TRAINER_POOL.model_copy(update={"roles": ["actor"]})
    rollout = ROLLOUT_POOL.model_copy(update={"roles": ["rollout", "reference"]})

    with pytest.raises(ProfileError) as caught:
        run_checks(CheckContext(GRPO, config, [actor, rollout]))

    assert "reference model with the actor" in caught.value.message


def test_the_runner_refuses_a_split_it_cannot_run_even_without_admission(tmp_path: Path) -> None:
    with pytest.raises(ProfileError):
        split_plan(tmp_path)


RAY_STUB = """#!/bin/sh
echo "ray $*" >> "$LOG"
case "$*" in
  *--block*) [ -n "$RAY_DIES" ] && exit "$RAY_DIES"; echo $$ > "$STATE/ray.pid"; exec sleep 60 ;;
  stop) [ -z "$WORKER" ] && exit 0
        while [ ! -f "$STATE/ray.pid" ]; do sleep 0.1; done; kill "$(cat "$STATE/ray.pid")" ;;
esac
exit 0
"""
PYTHON_STUB = """#!/bin/sh
if [ "$1" = -c ]; then echo "wait for $3 nodes" >> "$LOG"; exit 0; fi
echo "driver $*" >> "$LOG"
exit "${DRIVER_CODE:-0}"
"""


def stubbed(tmp_path: Path) -> dict[str, str]:
    """``ray`` and ``python3`` stubs that log their arguments; a blocking ``ray start --block``
    that ``ray stop`` ends (and that exits at once with $RAY_DIES when it is set)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ray").write_text(RAY_STUB)
    (bin_dir / "python3").write_text(PYTHON_STUB)
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "LOG": str(tmp_path / "calls.log"),
            "STATE": str(tmp_path)}  # fmt: skip


def node_argv(node_rank: int, tmp_path: Path) -> list[str]:
    b = binding(node_rank, 3).model_copy(update={"out_dir": str(tmp_path / "out")})
    argv, _ = ray_cluster_argv(b, ["python3", "-m", "verl.x", "a.b='q x'"])
    return argv


@pytest.mark.parametrize("driver_code", [0, 3])
def test_the_ray_head_runs_the_driver_records_its_exit_code_then_stops_ray(
    tmp_path: Path, driver_code: int
) -> None:
    """The real bash plumbing of node 0, with stubs for ``ray`` and ``python3``."""
    env = stubbed(tmp_path) | {"DRIVER_CODE": str(driver_code)}

    done = subprocess.run(node_argv(0, tmp_path), env=env, capture_output=True, timeout=30)

    assert done.returncode == driver_code, done.stderr
    assert (tmp_path / "calls.log").read_text().splitlines() == [
        "ray start --head --port=29500 --disable-usage-stats",
        "wait for 3 nodes",
        "driver -m verl.x a.b='q x'",
        "ray stop",
    ]
    exit_file = tmp_path / "out/.starforge/attempt-1.ray-driver-exit"
    assert exit_file.read_text() == f"{driver_code}\n"


@pytest.mark.parametrize("driver_code", [0, 1])
def test_a_ray_worker_stops_ray_and_exits_with_the_drivers_code(
    tmp_path: Path, driver_code: int
) -> None:
    exit_file = tmp_path / "out/.starforge/attempt-1.ray-driver-exit"
    exit_file.parent.mkdir(parents=True)
    exit_file.write_text(f"{driver_code}\n")  # what node 0 wrote before it stopped Ray

    done = subprocess.run(
        node_argv(1, tmp_path), env=stubbed(tmp_path) | {"WORKER": "1"}, timeout=30
    )

    assert done.returncode == driver_code
    assert sorted((tmp_path / "calls.log").read_text().splitlines()) == [
        "ray start --address=10.0.0.1:29500 --disable-usage-stats --block",  # in the background
        "ray stop",
    ]


@pytest.mark.parametrize("ray_code", [0, 1])
def test_a_ray_worker_whose_ray_ends_without_the_drivers_word_fails(
    tmp_path: Path, ray_code: int
) -> None:
    """The head died (or never started a driver): nothing says the training succeeded."""
    env = stubbed(tmp_path) | {"RAY_DIES": str(ray_code), "STARFORGE_DRIVER_EXIT_GRACE_S": "1"}

    done = subprocess.run(node_argv(1, tmp_path), env=env, timeout=30)

    assert done.returncode == 1


# --- checks ----------------------------------------------------------------------------------

GRPO = method("verl/grpo")
SFT = method("verl/sft")


def grpo_config(**values: Any) -> dict[str, Any]:
    config: dict[str, Any] = {}
    base = {
        "data.train_batch_size": 256,
        f"{ACTOR}.ppo_mini_batch_size": 64,
        f"{ACTOR}.ppo_micro_batch_size_per_gpu": 4,
        "actor_rollout_ref.rollout.n": 5,
        "algorithm.adv_estimator": "grpo",
        f"{ACTOR}.use_dynamic_bsz": False,
    }
    for key, value in {**base, **values}.items():
        set_path(config, key, value)
    return config


def problems(check: Any, m: Method, config: dict[str, Any], nodes: int | None) -> list[str]:
    return check(CheckContext(m, config, None if nodes is None else pools(m, nodes)))


def test_train_batch_must_be_whole_mini_batches() -> None:
    assert problems(checks.grpo_batch, GRPO, grpo_config(), None) == []

    found = problems(checks.grpo_batch, GRPO, grpo_config(**{"data.train_batch_size": 250}), None)

    assert found == [
        f"data.train_batch_size (250) must be divisible by "
        f"{ACTOR}.ppo_mini_batch_size (64): every update takes whole mini-batches"
    ]


def test_mini_batch_samples_must_split_into_micro_batches_on_every_rank() -> None:
    assert problems(checks.grpo_batch, GRPO, grpo_config(), nodes=2) == []

    found = problems(
        checks.grpo_batch, GRPO, grpo_config(**{f"{ACTOR}.ppo_mini_batch_size": 32}), nodes=2
    )

    assert found == [
        f"{ACTOR}.ppo_mini_batch_size (32) x actor_rollout_ref.rollout.n (5) = 160 samples "
        f"must be divisible by {ACTOR}.ppo_micro_batch_size_per_gpu (4) x data-parallel size "
        "(16 = 16 GPUs / sequence parallel 1) = 64"
    ]


def test_sequence_parallel_shrinks_the_data_parallel_size() -> None:
    config = grpo_config(
        **{f"{ACTOR}.ppo_mini_batch_size": 32, f"{ACTOR}.ulysses_sequence_parallel_size": 4}
    )

    # 160 samples over 16 / 4 = 4 ranks of micro-batches of 4 fits; with sp 1 it would not.
    assert problems(checks.grpo_batch, GRPO, config, nodes=2) == []


def test_the_micro_batch_rule_waits_for_the_profile_and_skips_dynamic_batching() -> None:
    odd = {f"{ACTOR}.ppo_mini_batch_size": 32}
    assert problems(checks.grpo_batch, GRPO, grpo_config(**odd), nodes=None) == []
    dynamic = grpo_config(**odd, **{f"{ACTOR}.use_dynamic_bsz": True})
    assert problems(checks.grpo_batch, GRPO, dynamic, nodes=2) == []


def test_micro_batch_size_is_required_without_dynamic_batching() -> None:
    config = grpo_config()
    del config["actor_rollout_ref"]["actor"]["ppo_micro_batch_size_per_gpu"]

    found = problems(checks.grpo_batch, GRPO, config, None)

    assert found == [
        f"{ACTOR}.ppo_micro_batch_size_per_gpu must be set when "
        f"{ACTOR}.use_dynamic_bsz is false (upstream's default is null)"
    ]


def test_all_generated_samples_must_spread_over_the_actor_gpus() -> None:
    # Sequence parallel 2 on 8 GPUs: 4 data-parallel ranks, but verl still wants the whole
    # step's samples (train_batch_size x n) to be a multiple of the 8 GPUs.
    fits = {
        "data.train_batch_size": 8,
        f"{ACTOR}.ppo_mini_batch_size": 2,
        f"{ACTOR}.ppo_micro_batch_size_per_gpu": 1,
        "actor_rollout_ref.rollout.n": 2,
        f"{ACTOR}.ulysses_sequence_parallel_size": 2,
    }
    assert problems(checks.grpo_batch, GRPO, grpo_config(**fits), nodes=1) == []

    found = problems(
        checks.grpo_batch, GRPO, grpo_config(**{**fits, "data.train_batch_size": 6}), nodes=1
    )

    assert found == [
        "data.train_batch_size (6) x actor_rollout_ref.rollout.n (2) = 12 samples "
        "must be divisible by the actor's GPUs (8)"
    ]


@given(
    mini=st.integers(1, 64),
    n=st.integers(2, 16),
    micro=st.integers(1, 8),
    nodes=st.integers(1, 4),
    gpn=st.sampled_from([1, 2, 4, 8]),
    k=st.integers(1, 4),
)
@settings(max_examples=200, deadline=None)
def test_the_micro_batch_rule_fires_exactly_when_divisibility_breaks(
    mini: int,
    n: int,
    micro: int,
    nodes: int,
    gpn: int,
    k: int,
) -> None:
    config = grpo_config(
        **{
            "data.train_batch_size": mini * k,
            f"{ACTOR}.ppo_mini_batch_size": mini,
            f"{ACTOR}.ppo_micro_batch_size_per_gpu": micro,
            "actor_rollout_ref.rollout.n": n,
        }
    )

    found = checks.grpo_batch(CheckContext(GRPO, config, pools(GRPO, nodes, gpn)))

    micro_problem = [p for p in found if "ppo_micro_batch_size_per_gpu (" in p]
    dp = nodes * gpn
    assert bool(micro_problem) == bool((mini * n) % (micro * dp))
    if micro_problem:
        assert f"= {mini * n} samples" in micro_problem[0] and f"({dp} = " in micro_problem[0]


def test_group_estimators_need_at_least_two_responses_per_prompt() -> None:
    assert problems(checks.group_size, GRPO, grpo_config(), None) == []
    assert (
        problems(
            checks.group_size,
            GRPO,
            grpo_config(**{"algorithm.adv_estimator": "gae", "actor_rollout_ref.rollout.n": 1}),
            None,
        )
        == []
    )

    found = problems(
        checks.group_size,
        GRPO,
        grpo_config(**{"algorithm.adv_estimator": "rloo", "actor_rollout_ref.rollout.n": 1}),
        None,
    )

    assert found == [
        "actor_rollout_ref.rollout.n (1) must be >= 2 for "
        "algorithm.adv_estimator=rloo: the advantage compares the responses to "
        "the same prompt"
    ]


def test_lengths_must_be_positive() -> None:
    assert problems(checks.lengths, GRPO, grpo_config(), None) == []

    found = problems(checks.lengths, GRPO, grpo_config(**{"data.max_response_length": 0}), None)

    assert found == ["data.max_response_length (0) must be positive"]


def sft_config(**values: Any) -> dict[str, Any]:
    config: dict[str, Any] = {}
    base = {
        "data.train_batch_size": 128,
        "data.micro_batch_size_per_gpu": 4,
        "data.use_dynamic_bsz": False,
    }
    for key, value in {**base, **values}.items():
        set_path(config, key, value)
    return config


def test_sft_batch_must_split_into_micro_batches_on_every_rank() -> None:
    assert problems(checks.sft_batch, SFT, sft_config(), nodes=2) == []

    found = problems(checks.sft_batch, SFT, sft_config(**{"data.train_batch_size": 96}), 2)

    assert found == [
        "data.train_batch_size (96) must be divisible by "
        "data.micro_batch_size_per_gpu (4) x data-parallel size (16 = 16 GPUs / "
        "sequence parallel 1) = 64 when data.use_dynamic_bsz is false"
    ]


def test_sft_with_dynamic_batches_only_needs_an_equal_share_per_rank() -> None:
    dynamic = {"data.use_dynamic_bsz": True}
    assert (
        problems(checks.sft_batch, SFT, sft_config(**dynamic, **{"data.train_batch_size": 96}), 2)
        == []
    )

    found = problems(
        checks.sft_batch, SFT, sft_config(**dynamic, **{"data.train_batch_size": 100}), 2
    )

    assert found == [
        "data.train_batch_size (100) must be divisible by the data-parallel size "
        "(16 = 16 GPUs / sequence parallel 1): each rank takes an equal share"
    ]


def test_a_failing_rule_is_a_batch_validation_error_naming_the_method() -> None:
    with pytest.raises(BatchValidation) as caught:
        run_checks(CheckContext(GRPO, grpo_config(**{"data.train_batch_size": 250}), None))

    assert "verl/grpo" in caught.value.message and "(250)" in caught.value.message
