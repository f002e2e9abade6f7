"""Server idle memory: the embedded server's resident set once idle, beside slurmctld's.

Starts ``python -m starforge.server`` in a fresh home (virtual inventory, local executor), waits
until it is idle (its CPU time stops growing across a second) and reads ``VmRSS`` from
``/proc/PID/status``; then runs one trivial run (which starts the warm runner, a process of its
own that forks the runners) and reads both again once idle. The anchor is slurmctld's ``VmRSS``
when the project's Slurm cluster runs (``scripts/slurm.sh start``). Also lists the heavy modules
whose native libraries the server process has mapped (torch, numpy, ...): it should have none.

Usage: .venv/bin/python bench/idle_rss.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from admissions import CONFIG, load
from resources import Server, package, post, wait_status

AIM_MB = 150
HEAVY = ("torch", "transformers", "numpy", "pandas", "datasets", "trl")


def rss_mb(pid: int) -> float | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    lines = [x for x in status.splitlines() if x.startswith("VmRSS:")]
    return round(int(lines[0].split()[1]) / 1024, 1) if lines else None  # None: a zombie


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def wait_idle(pid: int, limit_s: float = 60.0) -> None:
    deadline = time.monotonic() + limit_s
    before = cpu_ticks(pid)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = cpu_ticks(pid)
        if now - before <= 2:  # the loops' own ticks cost a few hundredths of a second
            return
        before = now


def children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def heavy_modules(pid: int) -> list[str]:
    maps = Path(f"/proc/{pid}/maps").read_text()
    return sorted({m for m in HEAVY if f"/site-packages/{m}/" in maps})


def slurmctld() -> dict[str, Any]:
    out = subprocess.run(["pgrep", "-x", "slurmctld"], capture_output=True, text=True).stdout
    pids = [int(x) for x in out.split()]
    if not pids:
        return {"measured": False, "why": "slurmctld is not running (scripts/slurm.sh start)"}
    return {"rss_mb": rss_mb(pids[0])}


def main() -> None:
    report: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "load_before": load()}}
    with tempfile.TemporaryDirectory() as tmp:
        srv = Server(Path(tmp) / "rss", CONFIG)
        pid = srv.proc.pid
        try:
            wait_idle(pid)
            fresh = rss_mb(pid)
            with srv.client() as c:
                wait_status(c, post(c, package(c, "true\n"), "h200:1"), {"succeeded", "failed"})
            wait_idle(pid)
            warm = {p: rss_mb(p) for p in children(pid)}  # the warm runner, where there is one
            report["starforge"] = {
                "server_idle_rss_mb": fresh,
                "server_idle_rss_after_a_run_mb": rss_mb(pid),
                "warm_runner_rss_mb": sum(v or 0 for v in warm.values()),
                "heavy_modules_in_the_server": heavy_modules(pid),
                "aim_mb": AIM_MB,
            }
        finally:
            srv.stop()
    report["slurmctld"] = slurmctld()
    report["machine"]["load_after"] = load()
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
