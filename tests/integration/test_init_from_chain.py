"""A chain on the tiny model: trl/sft, then trl/dpo ``--init-from`` its checkpoint, then ``sf
eval`` of the DPO run: each run records its parent and the child trains the parent's weights."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from starforge.project import experiments
from starforge.project.lab import Lab
from tests.conftest import Result, commit_all
from tests.tiny_inputs import prepare_experiment

pytestmark = [pytest.mark.integration, pytest.mark.training]


def tagged(log: str, tag: str) -> list[str]:
    return [ln.removeprefix(tag + " ") for ln in log.splitlines() if ln.startswith(tag + " ")]


def test_sft_then_dpo_from_its_checkpoint_then_eval(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = new_lab()
    experiments.new_experiment(lab, "s1", "trl/sft")
    experiments.new_experiment(lab, "d1", "trl/dpo")
    for exp in ("s1", "d1"):
        prepare_experiment(lab.root, exp)
    commit_all(lab.root, "add s1 and d1")
    short = ["-s", "max_steps=4", "-s", "save_steps=2", "--follow"]

    sft = sf("submit", "s1", "-p", "h200:1", "--model", "models/tiny-llama",
             "--train-data", "data/sft-train.jsonl", "--validation-data", "data/sft-val.jsonl",
             *short, cwd=lab.root)  # fmt: skip
    assert sft.code == 0, sft.err + sft.out[-3000:]
    parent = sf("job", "status", "--json").json()
    assert isinstance(parent, dict)

    dpo = sf("submit", "d1", "-p", "h200:1", "--init-from", f"run/{parent['run_id']}/checkpoint",
             "--train-data", "data/dpo-train.jsonl", "--validation-data", "data/dpo-val.jsonl",
             *short, cwd=lab.root)  # fmt: skip

    assert dpo.code == 0, dpo.err + dpo.out[-3000:]
    checkpoint = f"{parent['run_dir']}/out/checkpoints/checkpoint-4"
    [start] = tagged(dpo.out, "[start]")
    assert start.startswith(f"model={checkpoint} ")  # the parent's weights, not a --model
    child = sf("job", "status", "--json").json()
    assert isinstance(child, dict)
    init = child["spec"]["init_from"]
    assert (init["run_id"], init["kind"], init["resolved_step"]) == (
        parent["run_id"],
        "checkpoint",
        4,
    )
    assert (init["path"], init["parent_method"]) == (checkpoint, "trl/sft")
    text = sf("job", "status", child["run_id"]).out
    assert f"started from checkpoint step 4 of run {parent['run_id']} (trl/sft)" in text

    evaluated = sf("eval", "d1", "--model", f"run/{child['run_id']}",
                   "--data", "data/dpo-val.jsonl", cwd=lab.root)  # fmt: skip
    assert evaluated.code == 0, evaluated.err + evaluated.out[-2000:]
    report = json.loads((lab.root / "eval" / "d1" / "report.json").read_text())
    assert report["model"] == f"{child['run_dir']}/out/final"
    assert 0.0 <= report["metrics"]["accuracy"] <= 1.0 and report["n"] > 0
