"""Trivial runs completed per second on the local executor, beside Slurm's trivial jobs.

StarForge: one real embedded server (virtual inventory: 18 GPUs, so at most 18 one-GPU runs at
once; local executor; real runners forked by the warm runner). ``--n`` runs of ``true``
submitted back to back from one client; the figure is n / (first POST to the last run seen
ended), so the submit loop, the scheduler, the starts and the exit reports all count.

The anchor, in the same invocation, on the project's Slurm cluster (``scripts/slurm.sh``, its
tuned configuration; ``--slurm`` starts it when it is not running): ``--n`` ``sbatch --wrap
true`` back to back, until ``squeue`` is empty. Aim: >= 50 runs/s.

Usage: .venv/bin/python bench/throughput.py [--n 200] [--slurm]
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from admissions import CONFIG, Cluster, side_by_side
from resources import Server, package, post, wait_status

AIM_PER_S = 50


def starforge(root: Path, n: int) -> dict[str, Any]:
    srv = Server(root / "trivial", CONFIG)
    try:
        with srv.client() as c:
            body = package(c, "true\n")
            wait_status(c, post(c, body, "h200:1"), {"succeeded", "failed"})  # warm-up run
            began = time.perf_counter()
            run_ids = [post(c, body, "h200:1") for _ in range(n)]
            # Polled every 50 ms, as the anchor polls squeue: the watching costs both alike.
            ends = [wait_status(c, r, {"succeeded", "failed"}, poll=0.05) for r in run_ids]
            elapsed = time.perf_counter() - began
    finally:
        srv.stop()
    return {
        "runs": n,
        "succeeded": sum(v["status"] == "succeeded" for v in ends),
        "seconds": round(elapsed, 2),
        "runs_per_s": round(n / elapsed, 2),
        "aim_per_s": AIM_PER_S,
    }


def slurm(cluster: Cluster, n: int) -> dict[str, Any]:
    if not cluster.up:
        return {"measured": False, "why": "Slurm's cluster is not running (rerun with --slurm)"}
    began = time.perf_counter()
    for _ in range(n):
        cluster.run("sbatch", "-Q", "-o", "/dev/null", "--wrap", "true")
    cluster.wait_empty()
    elapsed = time.perf_counter() - began
    return {"jobs": n, "seconds": round(elapsed, 2), "jobs_per_s": round(n / elapsed, 2)}


def main() -> None:
    side_by_side(__doc__, 200, starforge, lambda cluster, _, n: slurm(cluster, n))


if __name__ == "__main__":
    main()
