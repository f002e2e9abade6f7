"""Trivial runs completed per second on the local executor, beside Slurm's trivial jobs.

StarForge: one real embedded server (virtual inventory: 18 GPUs, so at most 18 one-GPU runs at
once; local executor; real runners forked by the warm runner). ``--n`` runs of ``true``
submitted back to back from one client; the figure is n / (first POST to the last run seen
ended), so the submit loop, the scheduler, the starts and the exit reports all count. Wall time
suffers on a busy machine, so the CPU the server process used over that window is reported too
(``/proc/PID/stat``, per run), and the warm runner's own (its forks; the runners it forks are
reaped by the kernel, so their CPU is not counted there), and the whole machine's per run and
per Slurm job (``/proc/stat``: everything, the bench's own client and whatever else runs on the
machine included, so read it on a quiet machine).

The anchor, in the same invocation, on the project's Slurm cluster (``scripts/slurm.sh``, its
tuned configuration; ``--slurm`` starts it when it is not running): ``--n`` ``sbatch --wrap
true`` back to back, until ``squeue`` is empty. Aim: >= 50 runs/s.

Usage: .venv/bin/python bench/throughput.py [--n 200] [--slurm]
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from admissions import CONFIG, Cluster, side_by_side
from resources import Server, package, post, wait_status

AIM_PER_S = 50
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system seconds ``pid`` has used (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def machine_cpu_s() -> float:
    """CPU seconds all processes of the machine have used (``/proc/stat``: all but idle and
    iowait): the runners, jobs and clients included, which no process's own figure counts."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / TICKS


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def starforge(root: Path, n: int) -> dict[str, Any]:
    srv = Server(root / "trivial", CONFIG)
    try:
        with srv.client() as c:
            body = package(c, "true\n")
            wait_status(c, post(c, body, "h200:1"), {"succeeded", "failed"})  # warm-up run
            pids = [srv.proc.pid, *children(srv.proc.pid)]  # the server, its warm runner
            used = [cpu_s(p) for p in pids]
            machine, began = machine_cpu_s(), time.perf_counter()
            run_ids = [post(c, body, "h200:1") for _ in range(n)]
            # Polled every 50 ms, as the anchor polls squeue: the watching costs both alike.
            ends = [wait_status(c, r, {"succeeded", "failed"}, poll=0.05) for r in run_ids]
            elapsed, machine = time.perf_counter() - began, machine_cpu_s() - machine
            used = [cpu_s(p) - u for p, u in zip(pids, used, strict=True)]
    finally:
        srv.stop()
    return {
        "runs": n,
        "succeeded": sum(v["status"] == "succeeded" for v in ends),
        "seconds": round(elapsed, 2),
        "runs_per_s": round(n / elapsed, 2),
        "server_cpu_ms_per_run": round(1000 * used[0] / n, 1),
        "warm_runner_cpu_ms_per_run": round(1000 * sum(used[1:]) / n, 1),
        "machine_cpu_ms_per_run": round(1000 * machine / n, 1),
        "aim_per_s": AIM_PER_S,
    }


def slurm(cluster: Cluster, n: int) -> dict[str, Any]:
    if not cluster.up:
        return {"measured": False, "why": "Slurm's cluster is not running (rerun with --slurm)"}
    machine, began = machine_cpu_s(), time.perf_counter()
    for _ in range(n):
        cluster.run("sbatch", "-Q", "-o", "/dev/null", "--wrap", "true")
    cluster.wait_empty()
    elapsed, machine = time.perf_counter() - began, machine_cpu_s() - machine
    return {
        "jobs": n,
        "seconds": round(elapsed, 2),
        "jobs_per_s": round(n / elapsed, 2),
        "machine_cpu_ms_per_job": round(1000 * machine / n, 1),
    }


def main() -> None:
    side_by_side(__doc__, 200, starforge, lambda cluster, _, n: slurm(cluster, n))


if __name__ == "__main__":
    main()
