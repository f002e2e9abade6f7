"""A trl run of two processes on one node: torchrun's two ranks train one model, through the server.

The module's server runs jobs on the CPU with ``cpu_processes_per_node: 2``, so even ``--profile
h200:8`` (one node) is a world of two ranks, as eight GPUs would be eight.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from starforge.project.lab import Lab
from tests.conftest import Result
from tests.integration.conftest import embedded_server, wait_for
from tests.integration.test_distributed_trl import (
    FINAL,
    GRPO_INPUTS,
    SFT_INPUTS,
    series,
    submit,
    trl_lab,
)

pytestmark = [pytest.mark.integration, pytest.mark.training]
ONE_NODE = ["--profile", "h200:8"]


@pytest.fixture(scope="module")
def server_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    settings = {"cpu_processes_per_node": 2}
    with embedded_server(tmp_path_factory.mktemp("sf-home"), settings) as home:
        yield home


def whole_log(sf: Callable[..., Result], run_id: str) -> str:
    got = sf("job", "logs", run_id, "-n", "0", "--no-follow")
    assert got.code == 0, got.err
    return got.out


def test_status_and_dry_run_show_two_processes_on_one_node(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = trl_lab(new_lab, "s0", "trl/sft")
    plan = sf("submit", "s0", *ONE_NODE, *SFT_INPUTS, "--dry-run", "--json", cwd=lab.root)
    assert plan.code == 0, plan.err
    body: Any = plan.json()
    [node] = body["plans"]
    argv = node["argv"]
    assert argv[argv.index("torch.distributed.run") + 1 :][:3] == [
        "--nnodes=1",
        "--node_rank=0",
        "--nproc_per_node=2",
    ]
    assert node["env"]["NPROC_PER_NODE"] == "2"


def test_trl_sft_on_two_processes_of_one_node_has_the_losses_of_one_process(
    sf: Callable[..., Result], new_lab: Callable[..., Lab], tmp_path: Path
) -> None:
    lab = trl_lab(new_lab, "s1", "trl/sft")
    sets = ["-s", "max_steps=5", "-s", "eval_steps=1000", "-s", "per_device_train_batch_size=8"]
    run_id = submit(sf, lab, "s1", *ONE_NODE, *SFT_INPUTS, *sets)
    view = wait_for(sf, run_id, FINAL, timeout=400)
    log = whole_log(sf, run_id)
    assert view["status"] == "succeeded", log[-3000:]
    assert "[dist] world_size=2 rank=0 local_rank=0" in log
    assert "[dist] world_size=2 rank=1 local_rank=1" in log
    assert log.count("[summary] ") == 1  # rank 0 alone writes summary.json and says so
    shown = " ".join(sf("job", "status", run_id).out.split())  # as wrapped to the terminal
    assert "pools all: 1 x 8 h200 (2 processes per node)" in shown, shown
    ddp = series(sf, run_id, "loss")
    assert [s for s, _ in ddp] == [1, 2, 3, 4, 5]

    # The same training in one process: the run's own trainer arguments, a batch of 16.
    run_dir = Path(view["run_dir"])
    args = yaml.safe_load((run_dir / "state" / "attempt-1.trainer-args.yaml").read_text())
    args.update(per_device_train_batch_size=16, output_dir=str(tmp_path / "checkpoints"))
    config = tmp_path / "args.yaml"
    config.write_text(yaml.safe_dump(args))
    experiment = run_dir / "work" / "experiments" / "s1"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("STARFORGE_", "FORGE_"))},
        "FORGE_CONFIG": str(config),
        "FORGE_OUT_DIR": str(tmp_path),
        "FORGE_MODEL": str(run_dir / "work" / "models" / "tiny-llama"),
        "FORGE_TRAIN_DATA": str(run_dir / "work" / "data" / "sft-train.jsonl"),
    }
    single = subprocess.run(
        [sys.executable, "train.py"], cwd=experiment, env=env, capture_output=True, text=True
    )
    assert single.returncode == 0, single.stderr[-3000:]
    losses = [
        json.loads(line.removeprefix("[metrics] "))["loss"]
        for line in single.stdout.splitlines()
        if line.startswith("[metrics] ")
    ]
    assert [v for _, v in ddp] == pytest.approx(losses, rel=1e-4)


def test_trl_grpo_on_two_processes_of_one_node_raises_its_reward(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = trl_lab(new_lab, "g1", "trl/grpo")
    run_id = submit(sf, lab, "g1", *ONE_NODE, *GRPO_INPUTS, "-s", "eval_steps=1000")
    view = wait_for(sf, run_id, FINAL, timeout=400)
    log = whole_log(sf, run_id)
    assert view["status"] == "succeeded", log[-3000:]
    assert "[dist] world_size=2 rank=1 local_rank=1" in log
    assert [s for s, _ in series(sf, run_id, "reward")] == list(range(1, 21))
    summary = json.loads((Path(view["run_dir"]) / "out" / "summary.json").read_text())
    assert summary["final_reward"] > summary["first_reward"] + 0.3
