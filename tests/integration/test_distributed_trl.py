"""A trl run on two nodes is one training: real torchrun, real gloo DDP, through the real server.

The module's server runs jobs on the CPU (the virtual inventory: two nodes of 8 x h200) with one
process per node, so ``--profile h200:16`` is two nodes, two ranks, one process group. It beats
fast (0.5 s heartbeats, lost after 4 s) so a killed runner is noticed in seconds.
"""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from starforge.project import experiments
from starforge.project.lab import Lab
from tests.conftest import Result, commit_all
from tests.integration.conftest import embedded_server, wait_for
from tests.integration.test_lifecycle import act, view_of, wait_for_log, wait_until
from tests.server.factories import group_exists
from tests.tiny_inputs import prepare_experiment

pytestmark = [pytest.mark.integration, pytest.mark.training]
FINAL = {"succeeded", "failed", "stopped"}
NODES_2 = ["--profile", "h200:16"]  # two full nodes of the virtual inventory


@pytest.fixture(scope="module")
def server_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    settings = {
        "heartbeat_s": 0.5,
        "lost_after_s": 4,
        "stop_grace_s": 30,
        "pause_grace_s": 60,
        "cpu_processes_per_node": 1,
    }
    with embedded_server(tmp_path_factory.mktemp("sf-home"), settings) as home:
        yield home


def trl_lab(new_lab: Callable[..., Lab], exp: str, method: str) -> Lab:
    lab = new_lab(f"{exp}-lab")
    experiments.new_experiment(lab, exp, method)
    prepare_experiment(lab.root, exp)
    commit_all(lab.root, f"add {exp}")
    return lab


def submit(sf: Callable[..., Result], lab: Lab, exp: str, *args: str) -> str:
    got = sf("submit", exp, *args, "--json", cwd=lab.root)
    assert got.code == 0, got.err + got.out
    body = got.json()
    assert isinstance(body, dict)
    return str(body["run_id"])


SFT_INPUTS = [
    "--model",
    "models/tiny-llama",
    "--train-data",
    "data/sft-train.jsonl",
    "--validation-data",
    "data/sft-val.jsonl",
]
GRPO_INPUTS = [
    "--model",
    "models/tiny-llama",
    "--train-data",
    "data/train.jsonl",
    "--validation-data",
    "data/val.jsonl",
]


def node_log(view: dict[str, Any], attempt: int, node: int) -> str:
    name = f"attempt-{attempt}.log" if node == 0 else f"attempt-{attempt}.node-{node}.log"
    path = Path(view["run_dir"]) / "logs" / name
    return path.read_text() if path.exists() else ""


def series(sf: Callable[..., Result], run_id: str, key: str) -> list[tuple[int, float]]:
    body: Any = sf("job", "metrics", run_id, "-k", key, "--json").json()
    [found] = [s for s in body["series"] if s["key"] == key]
    return list(zip(found["steps"], found["values"], strict=True))


def rank_lines(text: str) -> list[str]:
    return re.findall(r"(?m)^\[dist\] (world_size=\d+ rank=\d+)", text)


def processes_of(run_id: str, attempt: int) -> list[int]:
    """The live processes of one attempt of a run, ranks included (they have sessions of their
    own), found by the run's variables in their environment."""
    wanted = {f"FORGE_RUN_ID={run_id}".encode(), f"FORGE_ATTEMPT={attempt}".encode()}
    found = []
    for proc in Path("/proc").iterdir():
        try:
            env = set((proc / "environ").read_bytes().split(b"\0"))
        except OSError:  # not a process, gone, or not ours to read
            continue
        if wanted <= env:
            found.append(int(proc.name))
    return found


def steps_of(log: str) -> list[int]:
    return [int(m) for m in re.findall(r'(?m)^\[metrics\] \{"step":(\d+),', log)]


def starts_of(log: str) -> list[str]:
    return re.findall(r"(?m)^\[start\] model=\S+ resume_from=(\S+) ", log)


def test_trl_sft_on_two_nodes_is_one_training_with_the_losses_of_one_process(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = trl_lab(new_lab, "s1", "trl/sft")
    common = ["-s", "max_steps=6", "-s", "save_steps=3", "-s", "eval_steps=1000"]
    # The same global batch of 16 rows: one process of 16, or two ranks of 8.
    one = submit(sf, lab, "s1", "--profile", "h200:1", *SFT_INPUTS, *common)
    two = submit(
        sf, lab, "s1", *NODES_2, *SFT_INPUTS, *common, "-s", "per_device_train_batch_size=8"
    )
    for run_id in (one, two):
        view = wait_for(sf, run_id, FINAL, timeout=400)
        assert view["status"] == "succeeded", node_log(view, 1, 0)[-3000:]

    view = view_of(sf, two)
    assert rank_lines(node_log(view, 1, 0)) == ["world_size=2 rank=0"]
    assert rank_lines(node_log(view, 1, 1)) == ["world_size=2 rank=1"]
    shown = sf("job", "logs", two, "-n", "0", "--no-follow").out  # every node, as a user reads
    assert "\n[dist] world_size=2 rank=0 " in shown
    assert "\n[node 1] [dist] world_size=2 rank=1 " in shown
    # Node 1 ran torchrun too, as rank 1 of the same process group: it logs no metrics.
    assert "torch.distributed.run --nnodes=2 --node_rank=1" in node_log(view, 1, 1)
    assert steps_of(node_log(view, 1, 1)) == []

    single, ddp = series(sf, one, "loss"), series(sf, two, "loss")
    assert [s for s, _ in ddp] == list(range(1, 7))  # one point per step: one trajectory
    assert [s for s, _ in single] == list(range(1, 7))
    for (_, a), (_, b) in zip(single, ddp, strict=True):
        assert b == pytest.approx(a, rel=1e-4)

    out = Path(view["run_dir"]) / "out"
    assert sorted(p.name for p in (out / "checkpoints").glob("checkpoint-*")) == [
        "checkpoint-3",
        "checkpoint-6",
    ]
    assert (out / "final" / "config.json").is_file()
    assert json.loads((out / "summary.json").read_text())["steps"] == 6


def test_trl_grpo_on_two_nodes_raises_its_reward_as_one_process_does(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = trl_lab(new_lab, "g1", "trl/grpo")
    run_id = submit(sf, lab, "g1", *NODES_2, *GRPO_INPUTS, "-s", "eval_steps=1000")
    view = wait_for(sf, run_id, FINAL, timeout=400)
    assert view["status"] == "succeeded", node_log(view, 1, 0)[-3000:]
    assert rank_lines(node_log(view, 1, 0)) == ["world_size=2 rank=0"]
    assert rank_lines(node_log(view, 1, 1)) == ["world_size=2 rank=1"]
    rewards = series(sf, run_id, "reward")
    assert [s for s, _ in rewards] == list(range(1, 21))
    summary = json.loads((Path(view["run_dir"]) / "out" / "summary.json").read_text())
    assert summary["steps"] == 20
    assert summary["final_reward"] > summary["first_reward"] + 0.3


def test_a_grpo_batch_that_two_ranks_cannot_split_into_groups_is_refused_naming_the_numbers(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = trl_lab(new_lab, "g2", "trl/grpo")
    # 6 completions per rank x 2 ranks = 12 is 3 groups of 4 on two nodes, 1.5 on one.
    sets = ["-s", "per_device_train_batch_size=6", "-s", "per_device_eval_batch_size=8"]
    got = sf("submit", "g2", "--profile", "h200:1", *GRPO_INPUTS, *sets, cwd=lab.root)
    assert got.code == 2
    assert "per_device_train_batch_size (6) x processes (1: 1 node(s) x 1 per node)" in got.err
    assert "= 6 must be divisible by num_generations (4)" in got.err
    plan = sf("submit", "g2", *NODES_2, *GRPO_INPUTS, *sets, "--dry-run", "--json", cwd=lab.root)
    assert plan.code == 0, plan.err
    body: Any = plan.json()
    argvs = [p["argv"] for p in body["plans"]]
    assert len(argvs) == 2
    for rank, argv in enumerate(argvs):  # each node's real command: torchrun, its own rank
        assert argv[argv.index("torch.distributed.run") + 1 :][:3] == [
            "--nnodes=2",
            f"--node_rank={rank}",
            "--nproc_per_node=1",
        ]


def test_pause_and_resume_of_a_two_node_run_resume_every_rank_from_one_checkpoint(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = trl_lab(new_lab, "g3", "trl/grpo")
    sets = ["-s", "max_steps=25", "-s", "save_steps=5", "-s", "eval_steps=1000"]
    run_id = submit(sf, lab, "g3", *NODES_2, *GRPO_INPUTS, *sets)
    wait_for_log(sf, run_id, r'\[metrics\] \{"step":12,')
    assert act(sf, "pause", run_id)["status"] == "pausing"
    view = wait_for(sf, run_id, {"paused", *FINAL})
    assert (view["status"], view["end_reason"], view["exit_code"]) == (
        "paused",
        "paused_by_user",
        143,
    ), node_log(view, 1, 0)[-3000:]
    kept = int(re.search(r"checkpoint-(\d+) \(step", view["reason"]).group(1))  # type: ignore[union-attr]
    assert kept >= 12
    for node in (0, 1):  # both ranks stopped at the step rank 0 saved, and said so
        assert f"[signal] SIGTERM: saving checkpoint-{kept} and stopping" in node_log(view, 1, node)
    wait_until(lambda: not processes_of(run_id, 1), "every rank and runner to exit")

    resumed = act(sf, "resume", run_id)
    assert resumed["message"].endswith(f"it continues from checkpoint-{kept} (step {kept})")
    view = wait_for(sf, run_id, FINAL, timeout=400)
    assert view["status"] == "succeeded", node_log(view, 2, 0)[-3000:]
    checkpoint = f"/checkpoints/checkpoint-{kept}"
    starts = starts_of(node_log(view, 2, 0)) + starts_of(node_log(view, 2, 1))
    assert len(starts) == 2 and all(s.endswith(checkpoint) for s in starts), starts
    one, two = steps_of(node_log(view, 1, 0)), steps_of(node_log(view, 2, 0))
    assert one[:kept] == list(range(1, kept + 1))
    assert two == list(range(kept + 1, 26))  # the step count goes on
    assert [s for s, _ in series(sf, run_id, "reward")] == list(range(1, 26))


def test_kill_9_of_node_1s_runner_retries_every_node_from_the_same_checkpoint(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = trl_lab(new_lab, "g4", "trl/grpo")
    sets = ["-s", "max_steps=25", "-s", "save_steps=5", "-s", "eval_steps=1000"]
    run_id = submit(sf, lab, "g4", *NODES_2, *GRPO_INPUTS, *sets)
    wait_for_log(sf, run_id, r'\[metrics\] \{"step":12,')
    refs = str(view_of(sf, run_id)["attempts"][0]["executor_ref"]).split(",")
    node_1 = int(refs[1].removeprefix("local:"))
    os.kill(node_1, signal.SIGKILL)  # node 1's runner only: its torchrun and rank live on

    wait_until(lambda: len(view_of(sf, run_id)["attempts"]) == 2, "the auto-retry")
    for pgid in (int(r.removeprefix("local:")) for r in refs):
        wait_until(lambda pgid=pgid: not group_exists(pgid), "the first attempt's groups to end")
    # torchrun's ranks live in sessions of their own: they end with their launchers, too.
    wait_until(lambda: not processes_of(run_id, 1), "every rank of the first attempt to end")
    view = wait_for(sf, run_id, FINAL, timeout=400)
    assert view["status"] == "succeeded", node_log(view, 2, 0)[-3000:]
    first, second = view["attempts"]
    assert first["end_reason"] == "node_lost"
    resumed = int(second["resumed_from"].rsplit("-", 1)[1])
    assert resumed >= 10
    starts = starts_of(node_log(view, 2, 0)) + starts_of(node_log(view, 2, 1))
    assert starts == [second["resumed_from"]] * 2
    assert steps_of(node_log(view, 2, 0)) == list(range(resumed + 1, 26))
    assert [s for s, _ in series(sf, run_id, "reward")] == list(range(1, 26))


def test_stop_of_a_two_node_run_ends_every_rank_of_every_node(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = trl_lab(new_lab, "g5", "trl/grpo")
    sets = ["-s", "max_steps=400", "-s", "save_steps=100", "-s", "eval_steps=1000"]
    run_id = submit(sf, lab, "g5", *NODES_2, *GRPO_INPUTS, *sets)
    wait_for_log(sf, run_id, r'\[metrics\] \{"step":3,')
    assert len(processes_of(run_id, 1)) >= 4  # a torchrun and a rank on each node, at least
    act(sf, "stop", run_id)
    view = wait_for(sf, run_id, FINAL)
    assert (view["status"], view["end_reason"]) == ("stopped", "stopped_by_user")
    wait_until(lambda: not processes_of(run_id, 1), "every rank of every node to end")
    for node in (0, 1):  # each rank heard the stop and said so
        assert "[signal] SIGTERM: saving checkpoint-" in node_log(view, 1, node)
