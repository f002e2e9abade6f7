"""The README's main job as a test: a real tiny GRPO run through the embedded server."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from starforge.project import experiments
from starforge.project.lab import Lab
from tests.conftest import Result, commit_all
from tests.integration.conftest import wait_for
from tests.tiny_inputs import prepare_experiment

pytestmark = [pytest.mark.integration, pytest.mark.training]


def test_trl_grpo_run_succeeds_logs_its_steps_and_its_reward_rises(
    sf: Callable[..., Result],
    new_lab: Callable[..., Lab],
) -> None:
    lab = new_lab()
    experiments.new_experiment(lab, "g1", "trl/grpo")
    prepare_experiment(lab.root, "g1")
    commit_all(lab.root, "add g1")
    args = [
        "--profile",
        "h200:1",
        "--model",
        "models/tiny-llama",
        "--train-data",
        "data/train.jsonl",
        "--validation-data",
        "data/val.jsonl",
    ]
    got = sf("submit", "g1", *args, "--follow", cwd=lab.root)
    assert got.code == 0, got.err + got.out[-3000:]
    # Forked by the warm trainer with torch and trl imported, not a fresh interpreter.
    assert "the job's interpreter was forked with its libraries imported" in got.out
    metrics = [
        json.loads(ln.removeprefix("[metrics] "))
        for ln in got.out.splitlines()
        if ln.startswith("[metrics] ")
    ]
    assert len(metrics) >= 10
    summary = json.loads(
        next(ln for ln in got.out.splitlines() if ln.startswith("[summary] ")).removeprefix(
            "[summary] "
        )
    )
    assert summary["final_reward"] > summary["first_reward"]

    again = sf("submit", "g1", *args, "--json", cwd=lab.root).json()
    assert isinstance(again, dict)
    assert (again["files_uploaded"], again["bytes_uploaded"]) == (0, 0)
    stopped = sf("job", "stop", str(again["run_id"]), "--json").json()
    assert stopped["accepted"] is True  # type: ignore[index]
    view = wait_for(sf, str(again["run_id"]), {"stopped", "failed", "succeeded"})
    assert view["status"] in {"stopped", "succeeded"}
