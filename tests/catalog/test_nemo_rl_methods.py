"""nemo-rl/grpo and nemo-rl/sft: declarations, templates, launch plans and config files, checks.

NeMo-RL needs GPUs and its container, so nothing here runs it: the declarations load, the
templates compose as ``sf new`` lays them out (experiment config + the lab's shared base and
model fragment), every parameter resolves, the compiled command and the config file it is given
are pinned by goldens (2 nodes x 8 GPUs, fixed paths, run r-0123456789), and the batch rules
accept and refuse what NeMo-RL 0.7.0 accepts and refuses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from starforge.catalog.adapters import CompileContext, LaunchPlan, compile_plan
from starforge.catalog.adapters.base import platform_config, run_config
from starforge.catalog.checks import CheckContext, run_checks
from starforge.catalog.checks import nemo_rl as checks
from starforge.catalog.loader import CATALOG_ROOT, Method, load_file
from starforge.contract import params
from starforge.contract.config import MISSING, compose, get_path, set_path
from starforge.contract.env import job_env
from starforge.contract.errors import BatchValidation, ParamError, ProfileError
from starforge.contract.jobspec import InputKind, InputRef, Inputs, JobSpec, Provenance
from starforge.contract.profiles import Pool
from tests.catalog.compile_harness import RUN_DIR, binding, lay_out, reader
from tests.catalog.test_verl_methods import RAY_HEAD_SCRIPT, RAY_WORKER_SCRIPT

METHODS = ["nemo-rl/grpo", "nemo-rl/sft"]
CONFIG_FILE = f"{RUN_DIR}/state/attempt-1.nemo-rl-config.yaml"


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
            model=InputRef(kind=InputKind.SHARED, value="/mnt/models/Qwen3.5-4B"),
        ),
        hyperparams=params.resolve(m.params, composed, sets or []),  # what the client records
        provenance=Provenance(git_commit="0" * 40, client_version="test"),
    )


def context(
    method_id: str, tmp_path: Path, node_rank: int = 0, nnodes: int = 2, **extra: Any
) -> CompileContext:
    """The compile context the runner builds for the template's experiment."""
    m = method(method_id)
    root = lay_out(m, tmp_path / "lab")
    spec = spec_for(m, root)
    b = binding(node_rank, nnodes, **extra)
    return CompileContext(
        spec=spec,
        method=m,
        binding=b,
        env=job_env(spec, b),
        config=run_config(spec, m, reader(root)),
    )


def compiled(method_id: str, tmp_path: Path, **kwargs: Any) -> LaunchPlan:
    return compile_plan(context(method_id, tmp_path, **kwargs))


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

    assert m.id == method_id and m.framework == "nemo-rl" and m.version == "0.7.0"
    assert m.runtime.versions["0.7.0"].image == "nvcr.io/nvidia/nemo-rl:v0.7.0"
    assert m.entrypoint.kind == "file" and m.entrypoint.launcher == "uv"
    assert m.config.mode == "dot-overrides" and m.requires == []
    assert set(m.checks) <= set(checks.CHECKS)
    assert 15 <= len(m.params) <= 30
    assert all(p.path == name for name, p in m.params.items())
    assert m.config.output_dir in m.config.reserved


@pytest.mark.parametrize("method_id", METHODS)
def test_template_composes_from_the_lab_base_and_model_fragment(
    method_id: str, tmp_path: Path
) -> None:
    m = method(method_id)
    root = lay_out(m, tmp_path)
    composed = compose("experiments/demo/config.yaml", reader(root))

    resolved = params.resolve(m.params, composed, [])

    assert set(resolved) == set(m.params)  # every parameter has a value (config or default)
    assert composed["policy"]["model_name"] == "Qwen/Qwen3.5-4B"
    assert composed["policy"]["tokenizer"]["name"] == "${policy.model_name}"
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


# --- the launch plans and the config file ---------------------------------------------------

DRIVER_EXIT = f"{RUN_DIR}/out/.starforge/attempt-1.ray-driver-exit"


def uv_run(script: str) -> str:
    """verl's Ray node scripts (golden-tested there) with NeMo-RL's ``uv run`` commands."""
    return (
        script.replace("ray start", "uv run ray start")
        .replace("ray stop", "uv run ray stop")
        .replace("python3 -c", "uv run python -c")
    )


GRPO_CONFIG = """# nemo-rl/grpo, run r-0123456789, attempt 1: written by StarForge.
# Edit the experiment's config.yaml, not this file.
defaults: /opt/nemo-rl/examples/configs/grpo_math_1B.yaml
grpo:
  num_prompts_per_step: 64
  num_generations_per_prompt: 8
  max_rollout_turns: 1
  max_num_epochs: 1
  max_num_steps: 500
  normalize_rewards: true
  use_leave_one_out_baseline: true
  val_period: 20
  val_at_start: false
  val_at_end: false
  max_val_samples: 256
  val_batch_size: 256
  seed: 42
  adv_estimator:
    name: grpo
loss_fn:
  reference_policy_kl_penalty: 0.01
  reference_policy_kl_type: k3
  ratio_clip_min: 0.2
  ratio_clip_max: 0.2
  token_level_loss: true
  force_on_policy_ratio: false
checkpointing:
  enabled: true
  metric_name: val:accuracy
  higher_is_better: true
  keep_top_k: 3
  save_period: 20
  checkpoint_dir: {RUN_DIR}/out/checkpoints
policy:
  train_global_batch_size: 512
  train_micro_batch_size: 2
  logprob_batch_size: ${policy.train_micro_batch_size}
  max_total_sequence_length: 1024
  precision: bfloat16
  dtensor_cfg:
    enabled: true
    tensor_parallel_size: 1
    context_parallel_size: 1
    activation_checkpointing: false
  sequence_packing:
    enabled: true
  max_grad_norm: 1.0
  optimizer:
    name: torch.optim.AdamW
    kwargs:
      lr: 1.0e-06
      weight_decay: 0.01
  generation:
    backend: vllm
    max_new_tokens: ${policy.max_total_sequence_length}
    temperature: 1.0
    top_p: 1.0
    vllm_cfg:
      tensor_parallel_size: 1
      gpu_memory_utilization: 0.6
      max_model_len: ${policy.max_total_sequence_length}
    colocated:
      enabled: true
  model_name: /mnt/models/Qwen3.5-4B
  tokenizer:
    name: ${policy.model_name}
data:
  max_input_seq_length: ${policy.max_total_sequence_length}
  shuffle: true
  train:
    dataset_name: OpenMathInstruct-2
    split_validation_size: 0.05
    seed: ${grpo.seed}
  validation: null
  default:
    prompt_file: examples/prompts/cot.txt
    system_prompt_file: null
    processor: math_hf_data_processor
    env_name: math
env:
  math:
    num_workers: 8
    math_verify_impl: hf_math_verify
logger:
  num_val_samples_to_print: 0
  wandb_enabled: false
  tensorboard_enabled: false
  mlflow_enabled: false
  swanlab_enabled: false
  monitor_gpus: true
  log_dir: {RUN_DIR}/out/logs
cluster:
  num_nodes: 2
  gpus_per_node: 8
""".replace("{RUN_DIR}", RUN_DIR)


def test_grpo_node_0_starts_the_ray_head_then_runs_run_grpo_with_the_written_config(
    tmp_path: Path,
) -> None:
    plan = compiled("nemo-rl/grpo", tmp_path, node_rank=0)

    head = uv_run(RAY_HEAD_SCRIPT)
    assert plan.argv[:6] == ["bash", "-c", head, "starforge-ray-head", "29500", "2"]
    assert "ray.nodes()" in plan.argv[6]  # the wait-for-every-node snippet
    assert plan.argv[7] == DRIVER_EXIT
    assert plan.argv[8:] == [
        "uv",
        "run",
        "python",
        "/opt/nemo-rl/examples/run_grpo.py",
        "--config",
        CONFIG_FILE,
    ]
    assert plan.cwd == "/opt/nemo-rl"
    assert plan.files == {CONFIG_FILE: GRPO_CONFIG}
    assert plan.env["NEMO_RL_DIR"] == "/opt/nemo-rl"
    assert plan.env["RAY_ADDRESS"] == "10.0.0.1:29500"


def test_grpo_other_nodes_join_the_ray_head_write_no_config_and_end_with_the_drivers_code(
    tmp_path: Path,
) -> None:
    plan = compiled("nemo-rl/grpo", tmp_path, node_rank=1)

    assert plan.argv == [
        "bash",
        "-c",
        uv_run(RAY_WORKER_SCRIPT),
        "starforge-ray-worker",
        "10.0.0.1:29500",
        DRIVER_EXIT,
    ]
    assert plan.files == {}  # only the driver (node 0) reads the config: one writer


def test_pools_of_their_own_are_refused_at_submit_and_by_the_runner(tmp_path: Path) -> None:
    policy = Pool(name="p0", profile="h200", series="h200", nodes=1, gpus_per_node=8,
                  roles=["policy"])  # fmt: skip
    generation = Pool(name="p1", profile="h100", series="h100", nodes=1, gpus_per_node=2,
                      roles=["generation"])  # fmt: skip
    config = grpo_config()

    with pytest.raises(ProfileError) as caught:
        run_checks(CheckContext(GRPO, config, [policy, generation]))
    with pytest.raises(ProfileError):
        compiled("nemo-rl/grpo", tmp_path, pools=[policy, generation], pool="p0")

    assert "generation=h100:2" in caught.value.message
    assert "one Ray cluster of equal nodes" in caught.value.message
    assert "policy.generation.colocated" in (caught.value.hint or "")


def test_the_seeds_kl_coef_is_refused_naming_nemo_rls_key() -> None:
    with pytest.raises(ParamError) as caught:
        params.parse_sets(GRPO.params, ["grpo.kl_coef=0.05"])

    assert "the key meant is 'loss_fn.reference_policy_kl_penalty'" in caught.value.message
    assert caught.value.hint == "use -s loss_fn.reference_policy_kl_penalty=0.05"
    assert params.parse_sets(GRPO.params, ["loss_fn.reference_policy_kl_penalty=0.05"]) == {
        "loss_fn.reference_policy_kl_penalty": 0.05
    }


def test_sft_on_one_node_is_the_plain_upstream_command(tmp_path: Path) -> None:
    plan = compiled("nemo-rl/sft", tmp_path, nnodes=1)

    assert plan.argv == [
        "uv",
        "run",
        "python",
        "/opt/nemo-rl/examples/run_sft.py",
        "--config",
        CONFIG_FILE,
    ]
    written = yaml.safe_load(plan.files[CONFIG_FILE])
    assert written["defaults"] == "/opt/nemo-rl/examples/configs/sft.yaml"
    assert written["checkpointing"]["checkpoint_dir"] == f"{RUN_DIR}/out/checkpoints"
    assert written["logger"]["log_dir"] == f"{RUN_DIR}/out/logs"
    assert written["cluster"] == {"num_nodes": 1, "gpus_per_node": 8}
    assert written["policy"]["model_name"] == "/mnt/models/Qwen3.5-4B"
    assert written["policy"]["train_global_batch_size"] == 64
    assert "RAY_ADDRESS" not in plan.env


def test_the_written_file_is_the_platform_config_under_upstreams_defaults(
    tmp_path: Path,
) -> None:
    ctx = context("nemo-rl/sft", tmp_path)
    expected = platform_config(ctx)
    set_path(expected, "logger.log_dir", f"{RUN_DIR}/out/logs")

    written = yaml.safe_load(compile_plan(ctx).files[CONFIG_FILE])

    assert written.pop("defaults") == "/opt/nemo-rl/examples/configs/sft.yaml"
    assert written == expected  # interpolations such as ${policy.model_name} stay as text


def test_nemo_rl_dir_from_the_environment_moves_script_defaults_and_cwd(tmp_path: Path) -> None:
    plan = compiled("nemo-rl/sft", tmp_path, nnodes=1, extra_env={"NEMO_RL_DIR": "/workspace/RL"})

    assert plan.argv[3] == "/workspace/RL/examples/run_sft.py"
    assert plan.cwd == "/workspace/RL"
    assert yaml.safe_load(plan.files[CONFIG_FILE])["defaults"] == (
        "/workspace/RL/examples/configs/sft.yaml"
    )


# --- checks ----------------------------------------------------------------------------------

GRPO = method("nemo-rl/grpo")
SFT = method("nemo-rl/sft")
GBS = "policy.train_global_batch_size"
MBS = "policy.train_micro_batch_size"


def config_of(**values: Any) -> dict[str, Any]:
    config: dict[str, Any] = {}
    for key, value in values.items():
        set_path(config, key.replace("__", "."), value)
    return config


def grpo_config(**values: Any) -> dict[str, Any]:
    base = {
        "grpo__num_prompts_per_step": 64,
        "grpo__num_generations_per_prompt": 8,
        "policy__train_global_batch_size": 512,
        "policy__train_micro_batch_size": 2,
    }
    return config_of(**{**base, **values})


def problems(check: Any, m: Method, config: dict[str, Any], nodes: int | None) -> list[str]:
    return check(CheckContext(m, config, None if nodes is None else pools(m, nodes)))


def test_samples_per_step_must_be_whole_global_batches() -> None:
    assert problems(checks.grpo_batch, GRPO, grpo_config(), None) == []
    assert (
        problems(checks.grpo_batch, GRPO, grpo_config(policy__train_global_batch_size=256), None)
        == []
    )

    found = problems(
        checks.grpo_batch, GRPO, grpo_config(policy__train_global_batch_size=384), None
    )

    assert found == [
        "grpo.num_prompts_per_step (64) x grpo.num_generations_per_prompt (8) = 512 must be "
        f"divisible by {GBS} (384): a partial global batch is dropped"
    ]


def test_force_on_policy_ratio_needs_exactly_one_global_batch_per_step() -> None:
    on_policy = {"loss_fn__force_on_policy_ratio": True}
    assert problems(checks.grpo_batch, GRPO, grpo_config(**on_policy), None) == []

    found = problems(
        checks.grpo_batch,
        GRPO,
        grpo_config(**on_policy, policy__train_global_batch_size=256),
        None,
    )

    assert found == [
        "grpo.num_prompts_per_step (64) x grpo.num_generations_per_prompt (8) = 512 must "
        f"equal {GBS} (256) when loss_fn.force_on_policy_ratio is true (one update per step)"
    ]


def test_global_batch_must_split_into_micro_batches_on_every_rank() -> None:
    assert problems(checks.grpo_batch, GRPO, grpo_config(), nodes=2) == []
    odd = grpo_config(policy__train_micro_batch_size=3)
    assert problems(checks.grpo_batch, GRPO, odd, nodes=None) == []  # profile not known yet

    found = problems(checks.grpo_batch, GRPO, odd, nodes=2)

    assert found == [
        f"{GBS} (512) must be divisible by {MBS} (3) x data-parallel size (16 = 16 training "
        "GPUs / policy.dtensor_cfg.tensor_parallel_size x "
        "policy.dtensor_cfg.context_parallel_size (1)) = 48"
    ]


def test_model_parallel_sizes_shrink_the_data_parallel_size() -> None:
    # 512 / (3 x 4 ranks) is not whole; Megatron TP 2 x PP 2 on 16 GPUs leaves 4 ranks.
    megatron = grpo_config(
        policy__train_micro_batch_size=4,
        policy__megatron_cfg__enabled=True,
        policy__megatron_cfg__tensor_model_parallel_size=2,
        policy__megatron_cfg__pipeline_model_parallel_size=2,
        policy__train_global_batch_size=256,
        grpo__num_prompts_per_step=32,
    )
    assert problems(checks.grpo_batch, GRPO, megatron, nodes=2) == []

    set_path(megatron, MBS, 24)
    found = problems(checks.grpo_batch, GRPO, megatron, nodes=2)

    assert found == [
        f"{GBS} (256) must be divisible by {MBS} (24) x data-parallel size (4 = 16 training "
        "GPUs / policy.megatron_cfg.tensor_model_parallel_size x "
        "policy.megatron_cfg.pipeline_model_parallel_size x "
        "policy.megatron_cfg.context_parallel_size (4)) = 96"
    ]


def test_dedicated_generation_gpus_are_not_training_gpus() -> None:
    config = grpo_config(
        policy__train_micro_batch_size=4,
        policy__generation__colocated__enabled=False,
        policy__generation__colocated__resources__num_nodes=1,
    )

    found = problems(checks.grpo_batch, GRPO, config, nodes=2)

    assert found == []  # 512 over 8 training GPUs x 4
    one_node = grpo_config(
        policy__train_micro_batch_size=4,
        policy__generation__colocated__enabled=False,
        policy__generation__colocated__resources__gpus_per_node=2,
    )
    assert "(6 = 6 training GPUs" in " ".join(problems(checks.grpo_batch, GRPO, one_node, 1))


@given(
    prompts=st.integers(1, 128),
    generations=st.integers(1, 32),
    gbs=st.integers(1, 1024),
)
@settings(max_examples=300, deadline=None)
def test_the_global_batch_rule_fires_exactly_when_divisibility_breaks(
    prompts: int, generations: int, gbs: int
) -> None:
    config = grpo_config(
        grpo__num_prompts_per_step=prompts,
        grpo__num_generations_per_prompt=generations,
        policy__train_global_batch_size=gbs,
    )

    found = problems(checks.grpo_batch, GRPO, config, None)

    assert bool(found) == bool((prompts * generations) % gbs)
    if found:
        assert f"= {prompts * generations} must be divisible by {GBS} ({gbs})" in found[0]


def test_validation_batch_must_fit_in_the_validation_samples() -> None:
    config = config_of(grpo__val_batch_size=256, grpo__max_val_samples=256)
    assert problems(checks.validation, GRPO, config, None) == []
    assert problems(checks.validation, GRPO, config_of(grpo__max_val_samples=None), None) == []

    found = problems(checks.validation, GRPO, config_of(grpo__val_batch_size=300), None)

    assert found == [
        "grpo.val_batch_size (300) must be <= grpo.max_val_samples (256): validation runs "
        "max_val_samples // val_batch_size batches"
    ]


def test_sft_train_and_validation_batches_must_split_on_every_rank() -> None:
    good = config_of(
        policy__train_global_batch_size=64,
        policy__train_micro_batch_size=2,
        sft__val_global_batch_size=32,
        sft__val_micro_batch_size=1,
    )
    assert problems(checks.sft_batch, SFT, good, nodes=2) == []

    set_path(good, "sft.val_global_batch_size", 24)
    set_path(good, GBS, 48)
    found = problems(checks.sft_batch, SFT, good, nodes=2)

    how = (
        "16 = 16 training GPUs / policy.dtensor_cfg.tensor_parallel_size x "
        "policy.dtensor_cfg.context_parallel_size (1)"
    )
    assert found == [
        f"{GBS} (48) must be divisible by {MBS} (2) x data-parallel size ({how}) = 32",
        "sft.val_global_batch_size (24) must be divisible by sft.val_micro_batch_size (1) x "
        f"data-parallel size ({how}) = 16",
    ]


def test_a_failing_rule_is_a_batch_validation_error_naming_the_method() -> None:
    with pytest.raises(BatchValidation) as caught:
        run_checks(CheckContext(GRPO, grpo_config(policy__train_global_batch_size=384), None))

    assert "nemo-rl/grpo" in caught.value.message and "(384)" in caught.value.message
