"""The trl/grpo template runs a real (tiny) GRPO job the way the platform runs it.

The template is copied into a lab's experiments/demo by the code of ``sf new`` (with the
framework's shared ``trl_support.py``), ``prepare.py`` builds the model and data, and
``train.py`` runs with the job's environment (the composed config in FORGE_CONFIG, or
config.yaml in a run by hand), offline, on CPU, forked with the training stack imported as the
local executor runs a trl job (``tests/catalog/preloaded.py``).
"""

from __future__ import annotations

import importlib.util
import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from starforge.project import experiments
from starforge.project.lab import Lab
from tests.catalog import preloaded

pytestmark = [
    pytest.mark.training,
    preloaded.ONE_WORKER,
    pytest.mark.timeout(300),
    pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="needs the [train] extra"),
]

SRC = Path(__file__).resolve().parents[2] / "src"
TEMPLATE = SRC / "starforge" / "catalog" / "trl" / "grpo" / "template"
# Slower steps (longer completions, bigger batch) so a SIGTERM lands well before the end.
SLOW = {
    "max_steps": 12,
    "max_completion_length": 64,
    "per_device_train_batch_size": 16,
    "num_generations": 4,
    "eval_steps": 6,
}


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A lab with the template as experiments/demo, after ``prepare.py``."""
    root = tmp_path_factory.mktemp("lab")
    (root / "starforge.yaml").write_text("project: demo\n")
    new_experiment(root, "demo")
    done = run_prepare(root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "wrote" in done.stdout
    return root


def new_experiment(root: Path, name: str) -> Path:
    """``experiments/NAME`` as ``sf new NAME --method trl/grpo`` makes it (trl_support.py too)."""
    lab = Lab(root=root, name="demo")
    return experiments.new_experiment(lab, name, "trl/grpo").path


def run_prepare(root: Path) -> subprocess.CompletedProcess[str]:
    exp = root / "experiments" / "demo"
    code, out, err = preloaded.run("prepare.py", exp, job_env(root, root / "none"), timeout=120)
    return subprocess.CompletedProcess(["prepare.py"], code, out, err)


def job_env(root: Path, out: Path, config: dict[str, Any] | None = None) -> dict[str, str]:
    """The environment the runner gives the job (paths as the platform resolves them).

    ``config`` is written as the composed config file FORGE_CONFIG points to; without it the
    job runs as by hand, from the experiment's config.yaml.
    """
    env = preloaded.base_env()
    env.update(
        FORGE_EXP_DIR=str(root / "experiments" / "demo"),
        FORGE_OUT_DIR=str(out),
        FORGE_RUN_ID="run-1",
        FORGE_ATTEMPT="1",
        FORGE_MODEL=str(root / "models" / "tiny-llama"),
        FORGE_TRAIN_DATA=str(root / "data" / "train.jsonl"),
        FORGE_VALIDATION_DATA=str(root / "data" / "val.jsonl"),
    )
    if config is not None:
        out.mkdir(parents=True, exist_ok=True)
        path = out.parent / "forge-config.yaml"
        path.write_text(yaml.safe_dump(config))
        env["FORGE_CONFIG"] = str(path)
    return env


def composed(out: Path, **overrides: Any) -> dict[str, Any]:
    """What the platform hands the job: config.yaml, the run's overrides, output_dir."""
    config = yaml.safe_load((TEMPLATE / "config.yaml").read_text())
    return {**config, **overrides, "output_dir": str(out / "checkpoints")}


def start_training(root: Path, env: dict[str, str]) -> preloaded.Job:
    Path(env["FORGE_OUT_DIR"]).mkdir(parents=True, exist_ok=True)
    return preloaded.start("train.py", Path(env["FORGE_EXP_DIR"]), env)


def train(root: Path, env: dict[str, str]) -> tuple[int, str]:
    """Its exit code, and its stdout followed by its stderr."""
    job = start_training(root, env)
    code = job.wait(timeout=240)
    return code, "".join(job.output())


def logged(output: str, tag: str = "[metrics] ") -> list[dict[str, Any]]:
    return [json.loads(line[len(tag) :]) for line in output.splitlines() if line.startswith(tag)]


def checkpoint_steps(out: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in (out / "checkpoints").glob("checkpoint-*"))


def test_prepare_builds_model_and_prompts_and_keeps_them_on_rerun(lab: Path) -> None:
    model = lab / "models" / "tiny-llama"
    assert (model / "config.json").is_file() and (model / "model.safetensors").is_file()
    assert (model / "tokenizer.json").is_file()
    train_rows = (lab / "data" / "train.jsonl").read_text().splitlines()
    val_rows = (lab / "data" / "val.jsonl").read_text().splitlines()
    assert len(train_rows) >= 24 and len(val_rows) >= 4
    assert all(set(json.loads(row)) == {"prompt"} for row in train_rows + val_rows)
    before = (model / "model.safetensors").read_bytes()

    again = run_prepare(lab)

    assert again.returncode == 0, again.stderr
    assert again.stdout.count("kept") == 3 and "wrote" not in again.stdout
    assert (model / "model.safetensors").read_bytes() == before


def test_demo_learns_logs_every_step_checkpoints_and_exports_once(
    lab: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"

    code, output = train(lab, job_env(lab, out))  # by hand: config.yaml, no FORGE_CONFIG

    assert code == 0, output
    [config] = logged(output, "[config] ")
    assert config["output_dir"] == str(out / "checkpoints") and config["max_steps"] == 20
    steps = logged(output)
    assert [m["step"] for m in steps] == list(range(1, 21))
    assert all(isinstance(m["reward"], float) and isinstance(m["loss"], float) for m in steps)
    assert [e["step"] for e in logged(output, "[eval] ")] == [10, 20]
    summary = json.loads((out / "summary.json").read_text())
    assert logged(output, "[summary] ") == [summary]
    assert summary["steps"] == 20
    assert summary["final_reward"] > summary["first_reward"]
    assert summary["max_reward"] > 0.5  # it visibly learned to emit "a"
    assert summary["final_reward"] == steps[-1]["reward"]
    assert 20 in checkpoint_steps(out)
    assert (out / "final" / "model.safetensors").is_file()
    assert (out / "final" / "tokenizer.json").is_file()

    code, again = train(lab, job_env(lab, out, composed(out)))  # run again, as the platform does

    assert code == 0, again
    assert logged(again) == []  # nothing trained past max_steps
    assert json.loads((out / "summary.json").read_text()) == summary


def test_sigterm_saves_a_checkpoint_and_a_rerun_resumes_to_the_end(
    lab: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    env = job_env(lab, out, composed(out, **SLOW))
    job = start_training(lab, env)
    for line in job.lines():
        if line.startswith("[metrics] ") and json.loads(line[10:])["step"] >= 3:
            job.send_signal(signal.SIGTERM)
            break
    code = job.wait(timeout=120)
    first_output = "".join(job.output())

    assert code == 143, first_output
    stopped_at = logged(first_output)[-1]["step"]
    assert 3 <= stopped_at < SLOW["max_steps"]
    assert checkpoint_steps(out)[-1] == stopped_at
    assert not (out / "final").exists() and not (out / "summary.json").exists()

    code, output = train(lab, env)  # same job again, no FORGE_RESUME_FROM

    assert code == 0, output
    steps = [m["step"] for m in logged(output)]
    assert steps == list(range(stopped_at + 1, SLOW["max_steps"] + 1))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == SLOW["max_steps"]


def test_forge_config_values_reach_the_trainer(lab: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    overrides = {"max_steps": 3, "learning_rate": 0.01, "eval_steps": 3, "save_steps": 3}

    code, output = train(lab, job_env(lab, out, composed(out, **overrides)))

    assert code == 0, output
    [config] = logged(output, "[config] ")
    assert config == {**composed(out), **overrides}  # the file's arguments, nothing else
    steps = logged(output)
    assert [m["step"] for m in steps] == [1, 2, 3]  # not config.yaml's 20
    assert steps[0]["learning_rate"] == pytest.approx(0.01)  # not config.yaml's 0.02
    assert checkpoint_steps(out) == [3]
    assert json.loads((out / "summary.json").read_text())["steps"] == 3


def test_a_run_by_hand_refuses_output_dir_in_config_yaml(lab: Path, tmp_path: Path) -> None:
    exp = new_experiment(lab, "by-hand")
    with (exp / "config.yaml").open("a") as f:
        f.write("output_dir: /somewhere/else\n")
    env = job_env(lab, tmp_path / "out")  # no FORGE_CONFIG
    env["FORGE_EXP_DIR"] = str(exp)

    code, output = train(lab, env)

    assert code == 2
    assert output.strip().splitlines() == [
        "train.py: error: output_dir is set by the platform ($FORGE_OUT_DIR/checkpoints); remove it"
    ]


@pytest.mark.parametrize(
    ("unset", "broken", "message"),
    [
        ("FORGE_TRAIN_DATA", None, "FORGE_TRAIN_DATA is not set"),
        (None, "FORGE_MODEL", "FORGE_MODEL=/no/such/model: no such folder"),
    ],
)
def test_missing_inputs_fail_fast_with_one_line_and_exit_2(
    lab: Path, tmp_path: Path, unset: str | None, broken: str | None, message: str
) -> None:
    env = job_env(lab, tmp_path / "out")
    if unset:
        del env[unset]
    if broken:
        env[broken] = "/no/such/model"

    code, output = train(lab, env)

    assert code == 2
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    assert lines[0].startswith(f"train.py: error: {message}")
