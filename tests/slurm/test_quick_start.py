"""On the real Slurm cluster, a plain job's runner starts it from the launch plan the server
compiled at dispatch (``catalog/adapters/planned.py``, ``runner/quick.py``), with the GPUs Slurm
allocated, before it imports the catalog or the HTTP client; it reports as any runner does."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from starforge.contract.layout import RunLayout
from starforge.project import experiments
from starforge.project.lab import Lab
from tests.conftest import Result, commit_all
from tests.slurm.conftest import SlurmCluster
from tests.slurm.starforge_on_slurm import FINAL, logs_of, slurm_server, submit, wait_status

pytestmark = pytest.mark.slurm
SCRIPT = 'echo "job on $SLURMD_NODENAME gpus=$CUDA_VISIBLE_DEVICES python=$(command -v python)"\n'


@pytest.fixture(scope="module")
def server_home(
    slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    with slurm_server(tmp_path_factory.mktemp("sf-slurm-quick"), {"heartbeat_s": 0.5}) as home:
        yield home


@pytest.fixture
def sf_home(server_home: Path) -> Path:
    return server_home


def test_a_plain_job_on_slurm_starts_from_the_plan_the_server_compiled(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = new_lab()
    experiments.new_experiment(lab, "q", "custom/custom")
    folder = lab.root / "experiments" / "q"
    (folder / "train.sh").write_text(SCRIPT)
    (folder / "config.yaml").write_text("starforge:\n  observability: platform\n")
    commit_all(lab.root, "a plain job")
    run_id = submit(sf, lab, "h200:1", exp="q")
    done = wait_status(sf, run_id, *FINAL)
    log = logs_of(done)
    assert done["status"] == "succeeded", log
    binding = json.loads(RunLayout(Path(str(done["run_dir"]))).binding(1, 0).read_text())
    assert binding["launch"]["argv"][0] == "bash"
    assert "the server unpacked the package" in log and "; planned)" in log
    # Slurm's GPU, and the runner's Python first on PATH (the method's observability: platform).
    python_dir = re.escape(os.path.dirname(sys.executable))
    assert re.search(rf"job on h200-\d gpus=\d python={python_dir}/python\n", log), log
