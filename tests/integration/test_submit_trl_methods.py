"""trl/sft and trl/dpo through the whole platform, with -s overrides that must reach the trainer."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from starforge.project import experiments
from starforge.project.lab import Lab
from tests.conftest import Result, commit_all
from tests.tiny_inputs import prepare_experiment

pytestmark = [pytest.mark.integration, pytest.mark.training]


def tagged(log: str, tag: str) -> list[dict[str, object]]:
    return [
        json.loads(ln.removeprefix(tag + " "))
        for ln in log.splitlines()
        if ln.startswith(tag + " ")
    ]


@pytest.mark.parametrize("method", ["sft", "dpo"])
def test_overrides_reach_the_trainer_and_shape_the_run(
    method: str,
    sf: Callable[..., Result],
    new_lab: Callable[..., Lab],
) -> None:
    lab = new_lab()
    experiments.new_experiment(lab, "e1", f"trl/{method}")
    prepare_experiment(lab.root, "e1")
    commit_all(lab.root, "add e1")
    got = sf(
        "submit",
        "e1",
        "--profile",
        "h200:1",
        "--model",
        "models/tiny-llama",
        "--train-data",
        f"data/{method}-train.jsonl",
        "--validation-data",
        f"data/{method}-val.jsonl",
        "-s",
        "learning_rate=0.004",
        "-s",
        "max_steps=7",
        "-s",
        "save_steps=3",
        "--follow",
        cwd=lab.root,
    )
    assert got.code == 0, got.err + got.out[-3000:]
    [config] = tagged(got.out, "[config]")
    assert (config["learning_rate"], config["max_steps"], config["save_steps"]) == (0.004, 7, 3)
    steps = [m["step"] for m in tagged(got.out, "[metrics]")]
    assert steps == list(range(1, 8))  # the run's behaviour follows max_steps=7
    [summary] = tagged(got.out, "[summary]")
    assert summary["final_loss"] < summary["first_loss"]  # type: ignore[operator]
    view = sf("job", "status", "--json").json()
    assert isinstance(view, dict)
    recorded = view["spec"]["hyperparams"]
    assert (recorded["learning_rate"], recorded["max_steps"]) == (0.004, 7)
