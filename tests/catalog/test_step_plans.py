"""Golden launch plans of step runs: export and eval programs, and the frameworks' converters."""

from __future__ import annotations

import json
import sys

import pytest

from starforge.catalog.adapters import CompileContext, compile_plan
from starforge.catalog.adapters.steps import converter_argv
from starforge.catalog.loader import get_method
from starforge.contract.jobspec import InputKind, InputRef, Inputs, JobSpec, Provenance
from starforge.contract.steps import DataRef, StepSpec
from tests.catalog.compile_harness import RUN_DIR, WORK_DIR, binding

PARENT_OUT = "/mnt/sf/runs/ada/lab/demo/r-parent0000/out"


def step_spec(method_id: str, step: StepSpec) -> JobSpec:
    return JobSpec(
        project="lab",
        experiment="demo",
        method=get_method(method_id).ref(),
        profiles=["h200:1"],
        inputs=Inputs(
            model=InputRef(kind=InputKind.HUB, value="org/tiny"),
            validation_data=InputRef(kind=InputKind.PACKAGE, value="data/val.jsonl"),
        ),
        hyperparams={"learning_rate": 0.01},
        provenance=Provenance(git_commit="c" * 40, client_version="0.1.0"),
        step=step,
    )


def context(method_id: str, step: StepSpec) -> CompileContext:
    return CompileContext(
        spec=step_spec(method_id, step),
        method=get_method(method_id),
        binding=binding(nnodes=1),
        env={"PATH": "/usr/bin"},
        config={"max_steps": 2},
    )


def test_a_trl_export_step_runs_the_export_program_on_the_parents_checkpoints() -> None:
    step = StepSpec(
        action="export",
        index=0,
        actions=["export"],
        root_run_id="r-parent0000",
        source_run_id="r-parent0000",
        metrics={"loss": 0.5},
        data=[DataRef(name="validation_data", kind="package", value="data/val.jsonl")],
    )
    plan = compile_plan(context("trl/sft", step))
    card = f"{RUN_DIR}/state/attempt-1.export-card.json"
    assert plan.argv == [
        sys.executable,
        "-m",
        "starforge.steps.export",
        "--framework",
        "trl",
        "--checkpoints",
        f"{PARENT_OUT}/checkpoints",
        "--out",
        f"{RUN_DIR}/out/export",
        "--card",
        card,
        "--format",
        "huggingface",
    ]
    written = json.loads(plan.files[card])
    assert written["run_id"] == "r-parent0000"
    assert written["git_commit"] == "c" * 40
    assert (written["method"], written["metrics"]) == ("trl/sft", {"loss": 0.5})


def test_an_export_of_a_chosen_step_names_it() -> None:
    step = StepSpec(
        action="export",
        index=0,
        root_run_id="r-parent0000",
        source_run_id="r-parent0000",
        checkpoint_step=40,
    )
    assert compile_plan(context("trl/sft", step)).argv[-2:] == ["--step", "40"]


def test_an_eval_step_runs_the_eval_program_on_the_exported_model() -> None:
    step = StepSpec(
        action="eval",
        index=1,
        actions=["export", "eval"],
        root_run_id="r-parent0000",
        source_run_id="r-export0000",
    )
    plan = compile_plan(context("trl/sft", step))
    config = f"{RUN_DIR}/state/attempt-1.eval-config.yaml"
    assert plan.argv == [
        sys.executable,
        "-m",
        "starforge.steps.eval",
        "--model",
        "/mnt/sf/runs/ada/lab/demo/r-export0000/out/export",
        "--method",
        "trl/sft",
        "--config",
        config,
        "--data",
        f"{WORK_DIR}/data/val.jsonl",
        "--out",
        f"{RUN_DIR}/out/eval/report.json",
    ]
    assert plan.files[config] == "max_steps: 2\n"


@pytest.mark.parametrize(
    ("framework", "checkpoint", "subdir", "argv"),
    [
        (
            "verl", "/ck/global_step_20", "actor",
            [
                "python", "-m", "verl.model_merger", "merge", "--backend", "fsdp",
                "--local_dir", "/ck/global_step_20/actor", "--target_dir", "/out/export",
            ],
        ),
        (
            "verl", "/ck/global_step_20", "",
            [
                "python", "-m", "verl.model_merger", "merge", "--backend", "fsdp",
                "--local_dir", "/ck/global_step_20", "--target_dir", "/out/export",
            ],
        ),
        (
            "nemo-rl", "/ck/step_20", "",
            [
                "uv", "run", "python", "/opt/nemo-rl/examples/converters/convert_dcp_to_hf.py",
                "--config=/ck/step_20/config.yaml",
                "--dcp-ckpt-path=/ck/step_20/policy/weights",
                "--hf-ckpt-path=/out/export",
            ],
        ),
    ],
)  # fmt: skip
def test_the_frameworks_own_converter_is_compiled_for_verl_and_nemo_rl(
    framework: str, checkpoint: str, subdir: str, argv: list[str]
) -> None:
    assert converter_argv(framework, checkpoint, "/out/export", subdir=subdir) == argv


@pytest.mark.parametrize(
    ("method_id", "subdir"), [("verl/grpo", ["--subdir", "actor"]), ("verl/sft", [])]
)
def test_a_verl_export_names_where_its_trainer_keeps_the_model(
    method_id: str, subdir: list[str]
) -> None:
    """PPO checkpoints keep the actor in global_step_N/actor; SFT ones in global_step_N."""
    step = StepSpec(
        action="export", index=0, root_run_id="r-parent0000", source_run_id="r-parent0000"
    )
    argv = compile_plan(context(method_id, step)).argv
    assert argv[argv.index("huggingface") + 1 :] == subdir


@pytest.mark.parametrize("method_id", ["verl/grpo", "nemo-rl/sft"])
def test_a_verl_or_nemo_rl_export_step_runs_the_export_program_with_its_framework(
    method_id: str,
) -> None:
    step = StepSpec(
        action="export", index=0, root_run_id="r-parent0000", source_run_id="r-parent0000"
    )
    argv = compile_plan(context(method_id, step)).argv
    assert argv[argv.index("--framework") + 1] == method_id.split("/")[0]
