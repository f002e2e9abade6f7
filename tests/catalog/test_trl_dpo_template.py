"""The trl/dpo template runs a real (tiny) DPO job the way the platform runs it.

The template is copied into a lab's experiments/demo, ``prepare.py`` builds the model and the
preference pairs, and ``train.py`` runs with the job's environment (the composed config in
FORGE_CONFIG), offline, on CPU, forked as the local executor forks a trl job (``trl_harness``).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from tests.catalog import preloaded
from tests.catalog.trl_harness import CATALOG, TemplateLab, logged, train

pytestmark = [
    pytest.mark.training,
    preloaded.ONE_WORKER,
    pytest.mark.timeout(300),
    pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="needs the [train] extra"),
]

METHOD = "dpo"
TEMPLATE = CATALOG / "trl" / METHOD / "template"
OVERRIDES = {"learning_rate": 0.003, "max_steps": 12}  # config.yaml says 0.001 and 20


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A lab with the template as experiments/demo, after ``prepare.py``."""
    return TemplateLab.create(tmp_path_factory.mktemp("lab"), METHOD).root


def job_env(root: Path, out: Path, config: dict[str, Any] | None = None) -> dict[str, str]:
    return TemplateLab(root, METHOD).env(out, config)


def composed(out: Path, **overrides: Any) -> dict[str, Any]:
    return TemplateLab(out, METHOD).composed(out, **overrides)


def test_prepare_writes_preference_pairs(lab: Path) -> None:
    assert (lab / "models" / "tiny-llama" / "model.safetensors").is_file()
    rows = [
        json.loads(line)
        for name in ("dpo-train.jsonl", "dpo-val.jsonl")
        for line in (lab / "data" / name).read_text().splitlines()
    ]
    assert len(rows) >= 100
    for row in rows:
        assert set(row) == {"prompt", "chosen", "rejected"}
        assert row["chosen"] == "xxxx" and row["rejected"] != "xxxx"
    assert len({row["prompt"] for row in rows}) == len(rows)


def test_forge_config_reaches_the_trainer_and_the_preference_is_learned(
    lab: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"

    code, output, errors = train(job_env(lab, out, composed(out, **OVERRIDES)))

    assert code == 0, output + errors
    [config] = logged(output, "[config] ")
    assert config["learning_rate"] == 0.003 and config["max_steps"] == 12
    assert config["output_dir"] == str(out / "checkpoints")
    steps = logged(output, "[metrics] ")
    assert [m["step"] for m in steps] == list(range(1, 13))  # FORGE_CONFIG's 12, not 20
    assert steps[0]["learning_rate"] == pytest.approx(0.003)
    # Step 1: the policy is the reference, so the loss is log 2 and no pair is preferred yet.
    assert steps[0]["loss"] == pytest.approx(0.6931, abs=1e-3)
    assert steps[0]["rewards/accuracies"] == 0.0
    evals = logged(output, "[eval] ")
    assert [e["step"] for e in evals] == [10, 12]
    summary = json.loads((out / "summary.json").read_text())
    assert logged(output, "[summary] ") == [summary]
    assert summary["steps"] == 12
    assert summary["final_loss"] < 0.5 < summary["first_loss"]
    assert summary["final_eval_accuracy"] == evals[-1]["eval_rewards/accuracies"] >= 0.9
    assert evals[-1]["eval_rewards/margins"] > 0
    assert (out / "checkpoints" / "checkpoint-12" / "trainer_state.json").is_file()
    assert (out / "final" / "model.safetensors").is_file()


def test_pairs_without_a_rejected_column_fail_with_one_line_and_exit_2(
    lab: Path, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "say abc:", "chosen": "xxxx"}) + "\n")
    out = tmp_path / "out"
    env = job_env(lab, out, composed(out))
    env["FORGE_TRAIN_DATA"] = str(bad)

    code, output, errors = train(env)

    assert code == 2, output + errors
    lines = errors.strip().splitlines()
    assert len(lines) == 1, errors
    assert lines[0].startswith(f"train.py: error: {bad}: no 'rejected' column")


def test_a_missing_forge_config_file_fails_with_exit_2(lab: Path, tmp_path: Path) -> None:
    env = job_env(lab, tmp_path / "out")
    env["FORGE_CONFIG"] = str(tmp_path / "nowhere.yaml")

    code, output, errors = train(env)

    assert code == 2, output + errors
    assert errors.startswith(f"train.py: error: FORGE_CONFIG={tmp_path / 'nowhere.yaml'}: ")
    assert len(errors.strip().splitlines()) == 1
