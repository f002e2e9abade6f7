"""The trl/sft template runs a real (tiny) SFT job the way the platform runs it.

The template is copied into a lab's experiments/demo, ``prepare.py`` builds the model and the
reversal data, and ``train.py`` runs as a subprocess with the job's environment (the composed
config in FORGE_CONFIG), offline, on CPU.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = [
    pytest.mark.training,
    pytest.mark.timeout(300),
    pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="needs the [train] extra"),
]

SRC = Path(__file__).resolve().parents[2] / "src"
TEMPLATE = SRC / "starforge" / "catalog" / "trl" / "sft" / "template"
OVERRIDES = {"learning_rate": 0.005, "max_steps": 12}  # config.yaml says 0.01 and 20


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A lab with the template as experiments/demo, after ``prepare.py``."""
    root = tmp_path_factory.mktemp("lab")
    (root / "starforge.yaml").write_text("project: demo\n")
    exp = root / "experiments" / "demo"
    shutil.copytree(TEMPLATE, exp, ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run(
        [sys.executable, "prepare.py"],
        cwd=exp,
        env=job_env(root, root / "none"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return root


def job_env(root: Path, out: Path, config: dict[str, Any] | None = None) -> dict[str, str]:
    """The runner's environment; ``config`` is written as the composed FORGE_CONFIG file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
    env.update(
        FORGE_EXP_DIR=str(root / "experiments" / "demo"),
        FORGE_OUT_DIR=str(out),
        FORGE_RUN_ID="run-1",
        FORGE_ATTEMPT="1",
        FORGE_MODEL=str(root / "models" / "tiny-llama"),
        FORGE_TRAIN_DATA=str(root / "data" / "sft-train.jsonl"),
        FORGE_VALIDATION_DATA=str(root / "data" / "sft-val.jsonl"),
        HF_HUB_OFFLINE="1",
        HF_HOME=str(root / ".hf-home"),
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
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


def train(env: dict[str, str]) -> tuple[int, str, str]:
    Path(env["FORGE_OUT_DIR"]).mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [sys.executable, "train.py"],
        cwd=env["FORGE_EXP_DIR"],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    return done.returncode, done.stdout, done.stderr


def logged(output: str, tag: str) -> list[dict[str, Any]]:
    return [json.loads(line[len(tag) :]) for line in output.splitlines() if line.startswith(tag)]


def test_prepare_writes_reversal_pairs(lab: Path) -> None:
    assert (lab / "models" / "tiny-llama" / "model.safetensors").is_file()
    rows = [
        json.loads(line)
        for name in ("sft-train.jsonl", "sft-val.jsonl")
        for line in (lab / "data" / name).read_text().splitlines()
    ]
    assert len(rows) >= 100
    for row in rows:
        assert set(row) == {"prompt", "completion"}
        assert row["prompt"] == f"rev {row['completion'][::-1]}="


def test_forge_config_reaches_the_trainer_and_the_loss_falls(lab: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"

    code, output, errors = train(job_env(lab, out, composed(out, **OVERRIDES)))

    assert code == 0, output + errors
    [config] = logged(output, "[config] ")
    assert config["learning_rate"] == 0.005 and config["max_steps"] == 12
    assert config["output_dir"] == str(out / "checkpoints")
    steps = logged(output, "[metrics] ")
    assert [m["step"] for m in steps] == list(range(1, 13))  # FORGE_CONFIG's 12, not 20
    assert steps[0]["learning_rate"] == pytest.approx(0.005)
    assert [e["step"] for e in logged(output, "[eval] ")] == [10, 12]  # and at the end
    summary = json.loads((out / "summary.json").read_text())
    assert logged(output, "[summary] ") == [summary]
    assert summary["steps"] == 12
    assert summary["first_loss"] > 4.0 and summary["final_loss"] < 3.0  # it visibly learned
    assert (out / "checkpoints" / "checkpoint-12" / "trainer_state.json").is_file()
    assert (out / "final" / "model.safetensors").is_file()


def test_a_run_by_hand_refuses_output_dir_in_config_yaml(lab: Path, tmp_path: Path) -> None:
    exp = lab / "experiments" / "by-hand"
    shutil.copytree(TEMPLATE, exp, ignore=shutil.ignore_patterns("__pycache__"))
    with (exp / "config.yaml").open("a") as f:
        f.write("output_dir: /somewhere/else\n")
    env = job_env(lab, tmp_path / "out")  # no FORGE_CONFIG
    env["FORGE_EXP_DIR"] = str(exp)

    code, output, errors = train(env)

    assert code == 2, output + errors
    assert output == ""
    assert errors.strip().splitlines() == [
        "train.py: error: output_dir is set by the platform ($FORGE_OUT_DIR/checkpoints); remove it"
    ]
