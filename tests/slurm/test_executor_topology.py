"""Where runs land on the real Slurm cluster: one Slurm job per attempt, on the nodes StarForge
chose, with the GPUs Slurm allocated (the runner takes Slurm's CUDA_VISIBLE_DEVICES)."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from starforge.contract.profiles import Pool
from starforge.project import experiments
from starforge.project.lab import Lab
from starforge.server.executors.base import NodeLaunch
from starforge.server.executors.slurm import SlurmExecutor
from starforge.server.settings import SlurmSettings
from tests.conftest import Result, commit_all
from tests.slurm.conftest import FINAL_STATES, SlurmCluster, wait_for
from tests.slurm.starforge_on_slurm import (
    FINAL,
    gated_lab,
    job_ids,
    logs_of,
    release,
    slurm_jobs,
    slurm_server,
    submit,
    view,
    wait_status,
)
from tests.tiny_inputs import prepare_experiment

pytestmark = pytest.mark.slurm
ALLREDUCE = """import datetime
import os

import torch
import torch.distributed as dist

os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
rank, world = int(os.environ["NODE_RANK"]), int(os.environ["NNODES"])
dist.init_process_group(
    "gloo", init_method="env://", rank=rank, world_size=world,
    timeout=datetime.timedelta(seconds=120),
)
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
node = os.environ["SLURMD_NODENAME"]
print(f"node {rank} of {world} on {node} via {os.environ['MASTER_ADDR']}: sum = {value.item():g}")
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def server_home(
    slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    # The test cluster's GPUs are files: jobs train on the CPU, one process per node.
    settings = {"devices": "cpu", "cpu_processes_per_node": 1}
    with slurm_server(tmp_path_factory.mktemp("sf-slurm"), settings) as home:
        yield home


@pytest.fixture
def sf_home(server_home: Path) -> Path:
    return server_home


@pytest.fixture
def gates(tmp_path: Path) -> Path:
    (tmp_path / "gates").mkdir()
    return tmp_path / "gates"


def test_the_server_says_it_runs_on_slurm_and_counts_the_clusters_gpus(
    sf: Callable[..., Result],
) -> None:
    server = sf("server", "status", "--json").json()
    assert isinstance(server, dict)
    assert server["executor"] == "slurm"
    status = sf("status", "--json").json()
    assert isinstance(status, dict)
    totals = {s["series"]: s["total"] for s in status["cluster"]["series"]}
    assert totals == {"h100": 8, "h200": 16}


def test_a_two_node_run_is_one_slurm_job_on_both_h200_nodes_running_a_gloo_all_reduce(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    pytest.importorskip("torch")
    made = new_lab()
    experiments.new_experiment(made, "gloo", "custom/custom")
    folder = made.root / "experiments" / "gloo"
    (folder / "allreduce.py").write_text(ALLREDUCE)
    (folder / "config.yaml").write_text("starforge:\n  observability: platform\n")
    (folder / "train.sh").write_text(
        f'#!/usr/bin/env bash\nset -euo pipefail\nexec "{sys.executable}" allreduce.py\n'
    )
    commit_all(made.root, "a gloo job")
    run_id = submit(sf, made, "h200:16", exp="gloo")
    done = wait_status(sf, run_id, *FINAL, deadline_s=240)
    text = logs_of(done)
    assert done["status"] == "succeeded", text
    [job] = job_ids(done)
    # The runners report before the batch script itself has ended: wait for Slurm's last word.
    # (COMPLETING is not the end: the state Slurm passes through while the job's steps exit.)
    record = wait_for(lambda: (r := slurm_jobs(job)[0])["job_state"] in FINAL_STATES and r, "end")
    assert (record["name"], record["nodes"], record["job_state"]) == (
        f"sf.{run_id}.1",
        "h200-[1-2]",
        "COMPLETED",
    )
    assert "node 0 of 2 on h200-1 via 127.0.0.1: sum = 3" in text
    assert "node 1 of 2 on h200-2 via 127.0.0.1: sum = 3" in text
    # What a user sees through sf: node 1's log, read by the server beside node 0's on Slurm.
    every = sf("job", "logs", run_id, "-n", "0", "--no-follow")
    assert every.code == 0, every.err
    lines = every.out.splitlines()
    assert "node 0 of 2 on h200-1 via 127.0.0.1: sum = 3" in lines
    assert "[node 1] node 1 of 2 on h200-2 via 127.0.0.1: sum = 3" in lines
    alone = sf("job", "logs", run_id, "--node", "1", "-n", "0", "--no-follow")
    assert alone.code == 0, alone.err
    assert "node 1 of 2 on h200-2 via 127.0.0.1: sum = 3" in alone.out.splitlines()
    assert "[node 1]" not in alone.out and "node 0 of 2" not in alone.out


def test_two_half_node_runs_share_one_node_with_disjoint_gpus(
    sf: Callable[..., Result], new_lab: Callable[..., Lab], gates: Path
) -> None:
    made = gated_lab(new_lab, gates)
    first, second = submit(sf, made, "h200:4"), submit(sf, made, "h200:4")
    runs = [wait_status(sf, r, "running") for r in (first, second)]
    seen = []
    for run in runs:
        line = wait_for(lambda r=run: re.search(r"node 0/1 on (\S+) GPUs=(\S+)", logs_of(r)), "log")
        seen.append((line[1], set(line[2].split(","))))
    assert seen[0][0] == seen[1][0], "both runs fit on one node: StarForge packs them"
    assert len(seen[0][1]) == len(seen[1][1]) == 4
    assert not seen[0][1] & seen[1][1]
    for run_id in (first, second):
        release(gates, run_id)
        assert wait_status(sf, run_id, *FINAL)["status"] == "succeeded"


PROBE = """#!/bin/sh
echo "$SLURMD_NODENAME $CUDA_VISIBLE_DEVICES $STARFORGE_SLURM_MASTER_ADDR" > "$1.seen"
while [ ! -e "$1.go" ]; do sleep 0.1; done
"""


def test_a_two_pool_attempt_is_a_heterogeneous_job_with_one_component_per_pool(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    # The executor alone, with a probe in place of the runner: each task writes what Slurm gave it.
    probe = tmp_path / "probe.sh"
    probe.write_text(PROBE)
    state, logs = tmp_path / "state", tmp_path / "logs"
    state.mkdir()
    logs.mkdir()
    executor = SlurmExecutor(SlurmSettings(), ["/bin/sh", str(probe)])
    pools = [
        Pool(name="train", profile="h200", series="h200", nodes=1, gpus_per_node=8),
        Pool(name="rollout", profile="h100", series="h100", nodes=1, gpus_per_node=2),
    ]
    nodes = [
        NodeLaunch(0, state / "node-0.json", logs / "attempt-1.log", "h200-2", "train"),
        NodeLaunch(1, state / "node-1.json", logs / "attempt-1.node-1.log", "h100-1", "rollout"),
    ]
    name = f"sf.het-{uuid.uuid4().hex[:8]}.1"
    refs = executor.start_attempt(name, nodes, pools, image="")
    job = int(refs[0].split(":")[1])
    try:
        assert refs == {0: f"slurm:{job}:0", 1: f"slurm:{job}:1"}
        seen = [wait_for(lambda n=n: _read(Path(f"{n.binding_path}.seen")), "probe") for n in nodes]
        assert seen == ["h200-2 0,1,2,3,4,5,6,7 127.0.0.1", "h100-1 0,1 127.0.0.1"]
        parts = slurm_jobs(job)
        assert [(p["partition"], p["nodes"]) for p in parts] == [
            ("h200", "h200-2"),
            ("h100", "h100-1"),
        ]
        # The same attempt again (a server that died before recording it) is not submitted twice.
        assert executor.start_attempt(name, nodes, pools, image="") == refs
        assert executor.is_alive(refs[0]) and executor.is_alive(refs[1])
        for n in nodes:
            Path(f"{n.binding_path}.go").touch()
        assert wait_for(lambda: not executor.is_alive(refs[1]), "the job to end")
        assert [p["job_state"] for p in slurm_jobs(job)] == ["COMPLETED", "COMPLETED"]
    finally:
        subprocess.run(["scancel", str(job)], check=False)


def _read(path: Path) -> str:
    return path.read_text().strip() if path.is_file() else ""


@pytest.mark.training
def test_the_readmes_tiny_grpo_run_succeeds_through_slurm(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = new_lab()
    experiments.new_experiment(lab, "g1", "trl/grpo")
    prepare_experiment(lab.root, "g1")
    commit_all(lab.root, "add g1")
    got = sf(
        "submit", "g1", "--profile", "h200:1", "--model", "models/tiny-llama",
        "--train-data", "data/train.jsonl", "--validation-data", "data/val.jsonl",
        "-s", "max_steps=10", "--follow", cwd=lab.root,
    )  # fmt: skip
    assert got.code == 0, got.err + got.out[-3000:]
    summary = next(ln for ln in got.out.splitlines() if ln.startswith("[summary] "))
    assert '"final_reward"' in summary
    runs = sf("job", "ls", "--json").json()
    assert isinstance(runs, list)
    done = view(sf, str(runs[0]["run_id"]))
    assert done["status"] == "succeeded"
    [job] = job_ids(done)
    assert slurm_jobs(job)[0]["name"] == f"sf.{done['run_id']}.1"


@pytest.mark.training
def test_a_two_node_trl_grpo_run_is_one_slurm_job_and_one_training(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = new_lab()
    experiments.new_experiment(lab, "g2", "trl/grpo")
    prepare_experiment(lab.root, "g2")
    commit_all(lab.root, "add g2")
    got = sf(
        "submit", "g2", "--profile", "h200:16", "--model", "models/tiny-llama",
        "--train-data", "data/train.jsonl", "--validation-data", "data/val.jsonl",
        "-s", "max_steps=10", "-s", "eval_steps=1000", "--json", cwd=lab.root,
    )  # fmt: skip
    assert got.code == 0, got.err + got.out
    run_id = str(got.json()["run_id"])  # type: ignore[index, call-overload]
    done = wait_status(sf, run_id, *FINAL, deadline_s=600)
    logs = [Path(done["run_dir"]) / "logs" / n for n in ("attempt-1.log", "attempt-1.node-1.log")]
    texts = [p.read_text() for p in logs]
    assert done["status"] == "succeeded", texts[0][-3000:] + texts[1][-3000:]
    [job] = job_ids(done)  # one Slurm job over both nodes, srun starting one runner on each
    record = wait_for(lambda: (r := slurm_jobs(job)[0])["job_state"] in FINAL_STATES and r, "end")
    assert (record["nodes"], record["job_state"]) == ("h200-[1-2]", "COMPLETED")
    for rank, text in enumerate(texts):  # torchrun on each node, ranks of one process group
        assert f"[dist] world_size=2 rank={rank} " in text
        assert f"--nnodes=2 --node_rank={rank} --nproc_per_node=1" in text
    body: Any = sf("job", "metrics", run_id, "-k", "reward", "--json").json()
    [reward] = body["series"]
    assert reward["steps"] == list(range(1, 11))  # one trajectory: rank 0 reports
    assert (Path(done["run_dir"]) / "out" / "final" / "config.json").is_file()
