"""The trl adapter with the platform's keys: ``eval:`` stays out of the trainer's arguments,
and an ``--init-from`` artifact is the job's model."""

from __future__ import annotations

import yaml

from starforge.catalog.adapters import CompileContext, compile_plan
from starforge.catalog.adapters.base import run_config
from starforge.catalog.loader import get_method
from starforge.contract.env import Binding, job_env
from starforge.contract.jobspec import InputKind, InputRef, Inputs, JobSpec, Provenance
from starforge.contract.lineage import ArtifactKind, InitFrom

RUN = "/s/runs/ada/lab/e1/r-0123456789"
PARENT = "/s/runs/ada/lab/sft/r-parent0001/out/checkpoints/checkpoint-20"


def context(files: dict[str, str], init_from: InitFrom | None = None) -> CompileContext:
    method = get_method("trl/dpo")
    binding = Binding(
        run_id="r-0123456789",
        attempt=1,
        user="ada",
        storage_root="/s",
        run_dir=RUN,
        work_dir=f"{RUN}/work",
        out_dir=f"{RUN}/out",
        log_path=f"{RUN}/logs/attempt-1.log",
    )
    model = None if init_from else InputRef(kind=InputKind.PACKAGE, value="models/m")
    spec = JobSpec(
        project="lab",
        experiment="e1",
        method=method.ref(),
        profiles=["h200:1"],
        inputs=Inputs(model=model),
        provenance=Provenance(git_commit="c" * 40, client_version="0.1.0"),
        init_from=init_from,
    )
    config = run_config(spec, method, files.get)
    return CompileContext(
        spec=spec, method=method, binding=binding, env=job_env(spec, binding), config=config
    )


def test_the_eval_section_is_not_a_trainer_argument() -> None:
    files = {
        "experiments/e1/config.yaml": "max_steps: 2\neval:\n  gate: {metric: accuracy, min: 1}\n"
    }
    plan = compile_plan(context(files))
    args = yaml.safe_load(plan.files[f"{RUN}/state/attempt-1.trainer-args.yaml"])
    assert args == {"max_steps": 2, "output_dir": f"{RUN}/out/checkpoints"}


def test_the_init_from_checkpoint_is_the_jobs_model() -> None:
    init = InitFrom(
        run_id="r-parent0001", kind=ArtifactKind.CHECKPOINT, path=PARENT, resolved_step=20
    )
    plan = compile_plan(context({}, init))
    assert plan.env["FORGE_MODEL"] == PARENT
