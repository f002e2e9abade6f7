"""Golden launch plans of the trl and custom adapters (what the runner and --dry-run compile)."""

from __future__ import annotations

import sys

import yaml

from starforge.catalog.adapters import CompileContext, compile_plan
from starforge.catalog.adapters.base import run_config
from starforge.catalog.loader import get_method
from starforge.contract.env import Binding, job_env
from starforge.contract.jobspec import InputKind, InputRef, Inputs, JobSpec, Provenance

RUN = "/s/runs/ada/lab/e1/r-0123456789"
WORK = f"{RUN}/work"


def binding() -> Binding:
    return Binding(
        run_id="r-0123456789",
        attempt=2,
        user="ada",
        storage_root="/s",
        run_dir=RUN,
        work_dir=WORK,
        out_dir=f"{RUN}/out",
        log_path=f"{RUN}/logs/attempt-2.log",
    )


def context(
    method_id: str, files: dict[str, str], hyperparams: dict[str, object]
) -> CompileContext:
    method = get_method(method_id)
    spec = JobSpec(
        project="lab",
        experiment="e1",
        method=method.ref(),
        profiles=["h200:1"],
        inputs=Inputs(model=InputRef(kind=InputKind.PACKAGE, value="models/m")),
        hyperparams=hyperparams,
        image="reg.example/t:1",
        provenance=Provenance(git_commit="c" * 40, client_version="0.1.0"),
    )
    config = run_config(spec, method, files.get)
    return CompileContext(
        spec=spec, method=method, binding=binding(), env=job_env(spec, binding()), config=config
    )


def test_trl_runs_train_py_with_the_resolved_trainer_arguments() -> None:
    files = {
        "experiments/e1/config.yaml": "defaults: base.yaml\nmax_steps: 20\n",
        "experiments/e1/base.yaml": "learning_rate: 0.1\nseed: 3\n",
    }
    plan = compile_plan(context("trl/grpo", files, {"learning_rate": 0.005}))
    config_path = f"{RUN}/state/attempt-2.trainer-args.yaml"
    assert plan.argv == [sys.executable, f"{WORK}/experiments/e1/train.py"]
    assert plan.cwd == f"{WORK}/experiments/e1"
    assert plan.env["FORGE_CONFIG"] == config_path
    assert yaml.safe_load(plan.files[config_path]) == {
        "learning_rate": 0.005,
        "max_steps": 20,
        "seed": 3,
        "output_dir": f"{RUN}/out/checkpoints",
    }


def test_custom_runs_train_sh_as_it_is() -> None:
    plan = compile_plan(context("custom/custom", {}, {}))
    assert plan.argv == ["bash", f"{WORK}/experiments/e1/train.sh"]
    assert plan.files == {}
    assert plan.env["FORGE_RUN_ID"] == "r-0123456789"
