"""`sf submit --dry-run`: the resolved config, the spec and every node's launch plan."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from starforge.project.lab import Lab
from tests.conftest import Result

pytestmark = [pytest.mark.integration, pytest.mark.client]


def dry_run(sf: Callable[..., Result], lab: Lab, *args: str) -> dict[str, Any]:
    got = sf("submit", *args, "--dry-run", "--json", cwd=lab.root)
    assert got.code == 0, got.err
    body = got.json()
    assert isinstance(body, dict)
    return body


def test_a_two_node_custom_run_has_one_plan_per_node_with_its_rank(
    sf: Callable[..., Result],
    new_lab: Callable[..., Lab],
) -> None:
    lab = new_lab(experiments_={"c1": "custom/custom"})
    plan = dry_run(
        sf,
        lab,
        "c1",
        "--profile",
        "h200:16",
        "--image",
        "reg.example/t:1",
        "--observability-url",  # custom/custom keeps its curves elsewhere by default
        "https://wandb.example/lab",
    )
    assert [(p["nodes"], p["gpus_per_node"]) for p in plan["pools"]] == [(2, 8)]
    ranks = [(n["node_rank"], n["env"]["NODE_RANK"], n["env"]["NNODES"]) for n in plan["plans"]]
    assert ranks == [(0, "0", "2"), (1, "1", "2")]
    assert plan["plans"][0]["argv"][0] == "bash"
    assert plan["spec"]["image"] == "reg.example/t:1"
    assert (plan["image"]["ref"], plan["image"]["source"]) == ("reg.example/t:1", "flag")


def test_a_trl_dry_run_shows_overrides_reaching_the_trainer_arguments(
    sf: Callable[..., Result],
    new_lab: Callable[..., Lab],
) -> None:
    lab = new_lab(experiments_={"g1": "trl/grpo"})
    (lab.root / "data").mkdir()
    for name in ("train.jsonl", "val.jsonl"):
        (lab.root / "data" / name).write_text('{"prompt": "x"}\n')
    plan = dry_run(
        sf,
        lab,
        "g1",
        "--profile",
        "h200:1",
        "--model",
        "org/model",
        "--train-data",
        "data/train.jsonl",
        "--validation-data",
        "data/val.jsonl",
        "-s",
        "learning_rate=0.005",
        "-s",
        "max_steps=7",
    )
    assert plan["spec"]["hyperparams"]["learning_rate"] == 0.005
    assert plan["config"]["max_steps"] == 7
    [node] = plan["plans"]
    [(path, content)] = node["files"].items()
    assert node["env"]["FORGE_CONFIG"] == path
    assert "learning_rate: 0.005" in content
    assert "output_dir: <storage>/runs/" in content
    assert plan["image"]["source"] == "catalog"  # no --image: the catalog's, unless the server's
    assert "framework default" in plan["image"]["note"]
    runs = sf("job", "ls", "--json").json()
    assert runs == []  # nothing was submitted
