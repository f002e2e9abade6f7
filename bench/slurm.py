"""What StarForge adds on top of Slurm: submit-to-start latency and throughput, side by side.

The anchor half: N plain ``sbatch`` jobs of one trivial script on the project's test cluster
(``scripts/slurm.sh start``). Each job stamps, on this machine's clock, when its first line ran
and when it ended; the bench stamps just before each submit. Printed as JSON:

* ``start_latency_s``: p50 / p90 / max of (job's first line - just before its submit);
* ``completed_per_s``: N / (last job's end - first submit): the submit loop and the runs together.

Jobs are submitted back to back from one client: 20 one-CPU jobs fit the h200 partition at
once (2 nodes x 32 CPUs), so the latency is Slurm's scheduling tick and launch, not a wait for
resources. Reference figures for this tuned cluster: ~0.26-0.43 s median single-job latency and
~45 jobs/s end to end (the note "slurm-on-one-machine").

The StarForge half (``--with-starforge``): the same script as N runs through ``sf submit`` on the
Slurm executor; see ``starforge_half`` below. Aim (issue 12): StarForge adds under 0.3 s to Slurm's
own start latency and keeps at least half of plain sbatch's throughput.

Usage: .venv/bin/python bench/slurm.py [--jobs 20] [--with-starforge]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# The trivial job: stamp its start and its end (the work between them is one `true`); the end
# stamp appears whole (rename), so a reader that sees it can read both.
JOB = """#!/bin/bash
date +%s.%N > "$1/start.$2"
true
date +%s.%N > "$1/.end.$2" && mv "$1/.end.$2" "$1/end.$2"
"""
DEADLINE_S = 300.0


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100), linear between the closest ranks."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    return statistics.quantiles(ordered, n=100, method="inclusive")[int(q) - 1]


def figures(submitted: list[float], started: list[float], ended: list[float]) -> dict[str, Any]:
    """The printed figures from the three clocks of N jobs (index i = job i)."""
    latency = [s - t for s, t in zip(started, submitted, strict=True)]
    span = max(ended) - min(submitted)
    return {
        "jobs": len(submitted),
        "start_latency_s": {
            "p50": round(percentile(latency, 50), 3),
            "p90": round(percentile(latency, 90), 3),
            "max": round(max(latency), 3),
        },
        "completed_per_s": round(len(submitted) / span, 2),
        "wall_s": round(span, 3),
    }


def wait_for_stamps(stamps: Path, n: int) -> tuple[list[float], list[float]]:
    """Wait (bounded) until every job wrote its end stamp; (starts, ends) by job index."""
    deadline = time.monotonic() + DEADLINE_S
    while len(list(stamps.glob("end.*"))) < n:
        if time.monotonic() > deadline:
            sys.exit(f"only {len(list(stamps.glob('end.*')))}/{n} jobs ended in {DEADLINE_S}s")
        time.sleep(0.05)

    def read(kind: str) -> list[float]:
        return [float((stamps / f"{kind}.{i}").read_text()) for i in range(n)]

    return read("start"), read("end")


def sbatch_half(n: int, work: Path) -> dict[str, Any]:
    """N plain sbatch jobs of JOB, submitted back to back."""
    stamps = work / "sbatch"
    stamps.mkdir()
    script = work / "job.sh"
    script.write_text(JOB)
    submitted: list[float] = []
    for i in range(n):
        submitted.append(time.time())
        argv = ["sbatch", "-Q", "-o", "/dev/null", "-J", f"bench-{i}", str(script)]
        subprocess.run([*argv, str(stamps), str(i)], check=True, capture_output=True)
    started, ended = wait_for_stamps(stamps, n)
    return figures(submitted, started, ended)


def starforge_half(n: int, work: Path) -> dict[str, Any]:
    """N runs of JOB through ``sf submit`` on the Slurm executor.

    H10 (Slurm executor): fill in here. Start a server with ``STARFORGE_EXECUTOR=slurm``, make a
    lab with a custom/custom experiment whose entrypoint is JOB (stamping into ``work /
    "starforge"`` by index), submit N runs back to back recording ``time.time()`` just before each
    ``sf submit``, then ``return figures(submitted, *wait_for_stamps(stamps, n))``.
    """
    raise NotImplementedError("the StarForge half needs the Slurm executor (issue 12)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--with-starforge", action="store_true")
    args = parser.parse_args()
    if subprocess.run(["sinfo", "-h"], capture_output=True).returncode != 0:
        sys.exit("the Slurm cluster does not answer: run `bash scripts/slurm.sh start` first")
    with tempfile.TemporaryDirectory(prefix="sf-bench-slurm-") as tmp:
        work = Path(tmp)
        result: dict[str, Any] = {"sbatch": sbatch_half(args.jobs, work)}
        if args.with_starforge:
            result["starforge"] = starforge_half(args.jobs, work)
            sb, sf = result["sbatch"], result["starforge"]
            result["starforge_added_p50_s"] = round(
                sf["start_latency_s"]["p50"] - sb["start_latency_s"]["p50"], 3
            )
            result["throughput_ratio"] = round(sf["completed_per_s"] / sb["completed_per_s"], 2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
