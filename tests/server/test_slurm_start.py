"""How the Slurm executor submits an attempt, against stand-ins for Slurm's commands on PATH
(the real cluster's runs are in tests/slurm): what it asks Slurm, and the script it gives."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from starforge.contract.env import Binding
from starforge.contract.layout import RunLayout
from starforge.contract.profiles import Pool
from starforge.server.executors.base import NodeLaunch
from starforge.server.executors.slurm import SlurmExecutor
from starforge.server.settings import SlurmSettings

# Each stand-in appends its name to calls.txt; sbatch keeps the script it was given.
FAKE = """#!/bin/sh
echo {name} >> "{dir}/calls.txt"
{body}
"""
BODIES = {
    "sbatch": 'cat > "{dir}/script.sh"\necho 41',
    "squeue": 'cat "{dir}/squeue.out" 2>/dev/null || true',
    "sinfo": 'cat "{dir}/sinfo.json"',
}
SINFO = {
    "nodes": [
        {"name": n, "address": a, "partitions": ["h200"], "gres": "gpu:h200:8", "state": ["IDLE"]}
        for n, a in (("h200-1", "10.0.0.7"), ("h200-2", "10.0.0.8"))
    ]
}
POOL = Pool(name="train", profile="h200", series="h200", nodes=1, gpus_per_node=8)


@pytest.fixture
def slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in BODIES.items():
        tool = bin_dir / name
        tool.write_text(FAKE.format(name=name, dir=tmp_path, body=body.format(dir=tmp_path)))
        tool.chmod(0o755)
    (tmp_path / "sinfo.json").write_text(json.dumps(SINFO))
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return tmp_path


def attempt(tmp_path: Path, node: str = "h200-2") -> tuple[RunLayout, list[NodeLaunch]]:
    layout = RunLayout(tmp_path / "runs" / "r-1")
    layout.state.mkdir(parents=True)
    binding = Binding(
        run_id="r-1", attempt=3, user="ada", storage_root=str(tmp_path), run_dir=str(layout.dir),
        work_dir=str(layout.work), out_dir=str(layout.out), log_path=str(layout.log(3)),
    )  # fmt: skip
    # Written by this server's dispatch as it places the attempt.
    layout.binding(3, 0).write_text(binding.model_dump_json())
    launch = NodeLaunch(0, layout.binding(3, 0), layout.log(3), node, "train")
    return layout, [launch]


def calls(slurm: Path) -> list[str]:
    return (slurm / "calls.txt").read_text().split()


def test_an_attempts_first_start_is_submitted_without_asking_slurm_for_its_name(
    slurm: Path,
) -> None:
    layout, nodes = attempt(slurm)
    refs = SlurmExecutor(SlurmSettings(), ["runner"]).start_attempt("sf.r-1.3", nodes, [POOL], "")
    assert refs == {0: "slurm:41:0"}
    assert calls(slurm) == ["sbatch"]
    assert layout.submitted(3).is_file()


def test_a_start_tried_before_reuses_the_live_job_of_its_name(slurm: Path) -> None:
    layout, nodes = attempt(slurm)
    layout.submitted(3).write_text("{}")  # a server that died before recording its sbatch
    (slurm / "squeue.out").write_text("77 RUNNING\n")
    refs = SlurmExecutor(SlurmSettings(), ["runner"]).start_attempt("sf.r-1.3", nodes, [POOL], "")
    assert refs == {0: "slurm:77:0"}
    assert calls(slurm) == ["squeue"]


def test_a_start_tried_before_whose_job_is_gone_is_submitted_again(slurm: Path) -> None:
    layout, nodes = attempt(slurm)
    layout.submitted(3).write_text("{}")  # its sbatch failed: nothing was submitted
    refs = SlurmExecutor(SlurmSettings(), ["runner"]).start_attempt("sf.r-1.3", nodes, [POOL], "")
    assert refs == {0: "slurm:41:0"}
    assert calls(slurm) == ["squeue", "sbatch"]


def test_an_attempt_placed_before_this_server_started_is_looked_up_first(slurm: Path) -> None:
    _, nodes = attempt(slurm)
    os.utime(nodes[0].binding_path, (0, 0))  # placed by the server before (a release with no
    (slurm / "squeue.out").write_text("78 PENDING\n")  # marker), which submitted it and died
    refs = SlurmExecutor(SlurmSettings(), ["runner"]).start_attempt("sf.r-1.3", nodes, [POOL], "")
    assert refs == {0: "slurm:78:0"}
    assert calls(slurm) == ["squeue"]


def test_the_job_is_given_rank_0s_address_from_the_nodes_the_server_read(slurm: Path) -> None:
    _, nodes = attempt(slurm, node="h200-2")
    executor = SlurmExecutor(SlurmSettings(), ["runner"])
    assert executor.inventory()  # the scheduler pass reads the nodes first
    executor.start_attempt("sf.r-1.3", nodes, [POOL], "")
    script = (slurm / "script.sh").read_text()
    assert "export STARFORGE_SLURM_MASTER_ADDR=10.0.0.8\n" in script
    assert "scontrol" not in script.split("trap")[0]


def test_without_the_nodes_read_the_job_looks_rank_0s_address_up_itself(slurm: Path) -> None:
    _, nodes = attempt(slurm)
    SlurmExecutor(SlurmSettings(), ["runner"]).start_attempt("sf.r-1.3", nodes, [POOL], "")
    script = (slurm / "script.sh").read_text()
    assert 'addr=$(scontrol show node "$first"' in script
