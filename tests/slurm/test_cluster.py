"""The project's Slurm test cluster behaves like the GPU cluster StarForge models.

Plain ``sbatch`` jobs, no StarForge: each job writes what Slurm gave it (node name and
CUDA_VISIBLE_DEVICES) into a file, and the test asserts on that file. These are the facts the
Slurm executor builds on; if one breaks, the executor's tests would fail for a cluster reason.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.slurm.conftest import ROOT, SlurmCluster, SlurmDriver, run, wait_for

pytestmark = pytest.mark.slurm

# The job's own report: "<node> <CUDA_VISIBLE_DEVICES>" into the file named by its first argument.
REPORT = 'echo "$SLURMD_NODENAME $CUDA_VISIBLE_DEVICES" > "$1"'
# Blocks (bounded) until the file named by its second argument exists: keeps jobs running together.
HOLD = 'for _ in $(seq 600); do [ -e "$2" ] && break; sleep 0.1; done'


def job_script(tmp_path: Path, *, hold: bool = False) -> Path:
    script = tmp_path / "job.sh"
    lines = ["#!/bin/bash", REPORT, *([HOLD] if hold else [])]
    script.write_text("\n".join(lines) + "\n")
    return script


def read_report(path: Path) -> tuple[str, list[str]]:
    node, _, devices = path.read_text().strip().partition(" ")
    return node, devices.split(",") if devices else []


def test_the_cluster_has_the_inventorys_partitions_nodes_and_gpus(
    slurm_cluster: SlurmCluster,
) -> None:
    assert slurm_cluster.nodes == {
        "h200-1": (["h200"], "gpu:h200:8"),
        "h200-2": (["h200"], "gpu:h200:8"),
        "h100-1": (["h100"], "gpu:h100:8"),
    }


def test_a_job_asking_for_four_h200_gpus_sees_four_devices(
    slurm: SlurmDriver, tmp_path: Path
) -> None:
    out = tmp_path / "report"
    job = slurm.sbatch("--gres=gpu:h200:4", "-o", "/dev/null", str(job_script(tmp_path)), str(out))

    assert slurm.wait_final(job) == "COMPLETED"
    node, devices = read_report(out)
    assert node in {"h200-1", "h200-2"}
    assert len(devices) == 4
    assert len(set(devices)) == 4


def test_two_four_gpu_jobs_on_one_node_get_disjoint_devices(
    slurm: SlurmDriver, tmp_path: Path
) -> None:
    script = job_script(tmp_path, hold=True)
    release = tmp_path / "release"
    outs = [tmp_path / "a", tmp_path / "b"]
    jobs = [
        slurm.sbatch(
            "-w",
            "h200-1",
            "--gres=gpu:h200:4",
            "-o",
            "/dev/null",
            str(script),
            str(o),
            str(release),
        )
        for o in outs
    ]
    # Both reports exist while neither job may end yet: the two ran on h200-1 at the same time.
    wait_for(lambda: all(o.exists() and o.read_text() for o in outs), "both jobs to start")
    release.touch()

    assert [slurm.wait_final(j) for j in jobs] == ["COMPLETED", "COMPLETED"]
    (node_a, gpus_a), (node_b, gpus_b) = (read_report(o) for o in outs)
    assert node_a == node_b == "h200-1"
    assert len(gpus_a) == len(gpus_b) == 4
    assert not set(gpus_a) & set(gpus_b)


def test_a_two_node_job_spans_both_h200_nodes_with_eight_gpus_each(
    slurm: SlurmDriver, tmp_path: Path
) -> None:
    script = tmp_path / "two-nodes.sh"
    # One task per node; each writes its own report, named after its node.
    task = 'echo "$SLURMD_NODENAME $CUDA_VISIBLE_DEVICES" > "$1/report-$SLURMD_NODENAME"'
    script.write_text(f"#!/bin/bash\nsrun bash -c '{task}' _ \"{tmp_path}\"\n")
    job = slurm.sbatch("-N2", "--gres=gpu:8", "-o", str(tmp_path / "out"), str(script))

    assert slurm.wait_final(job) == "COMPLETED", (tmp_path / "out").read_text()
    reports = {p.name: read_report(p) for p in tmp_path.glob("report-*")}
    assert sorted(reports) == ["report-h200-1", "report-h200-2"]
    for name, (node, devices) in reports.items():
        assert name == f"report-{node}"
        assert sorted(devices) == [str(i) for i in range(8)]


def test_the_h100_partition_runs_h100_jobs_and_slurm_rejects_a_gpu_type_it_lacks(
    slurm: SlurmDriver, tmp_path: Path
) -> None:
    out = tmp_path / "report"
    job = slurm.sbatch(
        "-p", "h100", "--gres=gpu:h100:2", "-o", "/dev/null", str(job_script(tmp_path)), str(out)
    )
    assert slurm.wait_final(job) == "COMPLETED"
    node, devices = read_report(out)
    assert node == "h100-1"
    assert len(devices) == 2

    rejected = run(["sbatch", "-p", "h200", "--gres=gpu:h100:1", "--wrap", "true"])
    assert rejected.returncode != 0
    assert "Requested node configuration is not available" in rejected.stderr


def test_the_test_command_starts_the_cluster_before_the_suite_and_requires_it() -> None:
    steps = (ROOT / "scripts/test.sh").read_text()
    start = steps.index("bash scripts/slurm.sh start")
    assert start < steps.index("pytest")
    assert re.search(r"^trap .*EXIT", steps, re.M)
    assert "export STARFORGE_REQUIRE_SLURM=1" in steps
