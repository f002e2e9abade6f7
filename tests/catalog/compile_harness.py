"""Shared ground for the golden launch-plan tests: a lab laid out by the real ``sf new`` code and
the binding of node N of a 2 x 8-GPU run at fixed paths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starforge.catalog.loader import Method
from starforge.contract.env import Binding
from starforge.project import experiments
from starforge.project.lab import Lab

RUN_DIR = "/mnt/sf/runs/ada/lab/demo/r-0123456789"
WORK_DIR = f"{RUN_DIR}/work"
reader = experiments.lab_reader


def lay_out(m: Method, root: Path, name: str = "demo") -> Path:
    """The lab ``sf new`` makes: template/* in experiments/NAME, template/lab/* at the root."""
    (root / "experiments").mkdir(parents=True, exist_ok=True)
    experiments.new_experiment(Lab(root=root, name="lab"), name, m.id)
    return root


def binding(node_rank: int = 0, nnodes: int = 2, **extra: Any) -> Binding:
    return Binding(
        run_id="r-0123456789",
        attempt=1,
        user="ada",
        storage_root="/mnt/sf",
        run_dir=RUN_DIR,
        work_dir=WORK_DIR,
        out_dir=f"{RUN_DIR}/out",
        log_path=f"{RUN_DIR}/logs/attempt-1.log",
        node_rank=node_rank,
        nnodes=nnodes,
        gpus_per_node=8,
        master_addr="10.0.0.1",
        master_port=29500,
        **extra,
    )
