"""The trl/sft template runs a real (tiny) SFT job the way the platform runs it.

The template is copied into a lab's experiments/demo, ``prepare.py`` builds the model and the
reversal data, and ``train.py`` runs with the job's environment (the composed config in
FORGE_CONFIG), offline, on CPU, forked as the local executor forks a trl job (``trl_harness``).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from tests.catalog import preloaded
from tests.catalog.trl_harness import TemplateLab, logged, train

pytestmark = [
    pytest.mark.training,
    preloaded.ONE_WORKER,
    pytest.mark.timeout(300),
    pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="needs the [train] extra"),
]

METHOD = "sft"
OVERRIDES = {"learning_rate": 0.005, "max_steps": 12}  # config.yaml says 0.01 and 20


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A lab with the template as experiments/demo, after ``prepare.py``."""
    return TemplateLab.create(tmp_path_factory.mktemp("lab"), METHOD).root


def job_env(root: Path, out: Path, config: dict[str, Any] | None = None) -> dict[str, str]:
    return TemplateLab(root, METHOD).env(out, config)


def composed(out: Path, **overrides: Any) -> dict[str, Any]:
    return TemplateLab(out, METHOD).composed(out, **overrides)


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
    exp = TemplateLab(lab, METHOD).new_experiment("by-hand")
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
