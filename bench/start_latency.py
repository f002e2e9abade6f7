"""Submit to running on an idle server, p50 and p90, beside Slurm's ``sbatch`` to start.

StarForge: one real embedded server (virtual inventory, local executor, real runners: the warm
runner forks each one). ``--n`` runs of ``true``, one at a time on an idle cluster, random
0.2-1.2 s gaps (a fixed gap phase-locks to any periodic work); the client's clock from just before
``POST /jobs`` to ``running`` seen (polled every 5 ms), and the server's own clock from the run's
``queued`` event to its ``starting`` (the scheduler) and ``running`` (the runner's report) events.

The anchor, in the same invocation, on the project's Slurm cluster (``scripts/slurm.sh``;
``--slurm`` starts it when it is not running): ``sbatch`` of a script that stamps its first line
on this machine's clock, minus the time just before ``sbatch`` ran. Aim: p50 <= 0.2 s.

Usage: .venv/bin/python bench/start_latency.py [--n 15] [--slurm]
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from admissions import CONFIG, Cluster, side_by_side
from resources import Server, event_at, package, post, wait_status

AIM_P50_S = 0.2


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    at = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"p50": round(at(0.5), 3), "p90": round(at(0.9), 3), "max": round(ordered[-1], 3)}


def starforge(root: Path, n: int) -> dict[str, Any]:
    srv = Server(root / "idle", CONFIG)
    client_s, starting_s, running_s = [], [], []
    try:
        with srv.client() as c:
            body = package(c, "true\n")
            wait_status(c, post(c, body, "h200:1"), {"succeeded", "failed"})  # warm-up run
            for _ in range(n):
                time.sleep(random.uniform(0.2, 1.2))
                began = time.perf_counter()
                run_id = post(c, body, "h200:1")
                wait_status(c, run_id, {"running", "succeeded", "failed"})
                client_s.append(time.perf_counter() - began)
                view = wait_status(c, run_id, {"succeeded", "failed"}, poll=0.05)
                if view["status"] != "succeeded":
                    raise RuntimeError(f"{run_id} {view['status']}: {view['reason']}")
                queued = event_at(view, "queued")
                starting_s.append((event_at(view, "starting") - queued).total_seconds())
                if any(e["dst"] == "running" for e in view["events"]):
                    running_s.append((event_at(view, "running") - queued).total_seconds())
    finally:
        srv.stop()
    return {
        "client_post_to_running_seen_s": percentiles(client_s),
        "server_queued_to_starting_s": percentiles(starting_s),
        "server_queued_to_running_s": percentiles(running_s) if running_s else {},
        "n": n,
        "aim_p50_s": AIM_P50_S,
    }


def slurm(cluster: Cluster, root: Path, n: int) -> dict[str, Any]:
    if not cluster.up:
        return {"measured": False, "why": "Slurm's cluster is not running (rerun with --slurm)"}
    samples = []
    for i in range(n):
        time.sleep(random.uniform(0.2, 1.2))
        stamp = root / f"slurm-start-{i}"
        began = time.time()
        cluster.run("sbatch", "-Q", "-o", "/dev/null", "--wrap", f"date +%s.%N > {stamp}")
        while not stamp.exists() or not stamp.read_text().strip():
            time.sleep(0.005)
        samples.append(float(stamp.read_text()) - began)
    cluster.wait_empty()
    return {"sbatch_to_first_line_s": percentiles(samples), "n": n}


def main() -> None:
    side_by_side(__doc__, 15, starforge, slurm)


if __name__ == "__main__":
    main()
