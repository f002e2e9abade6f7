"""What StarForge adds on top of Slurm: submit-to-start latency and throughput, side by side.

The anchor half: N plain ``sbatch`` jobs of one trivial script on the project's test cluster
(``scripts/slurm.sh start``). Each job stamps, on this machine's clock, when its first line ran
and when it ended; the bench stamps just before each submit. Printed as JSON:

* ``start_latency_s``: p50 / p90 / max of (job's first line - just before its submit);
* ``completed_per_s``: N / (last job's end - first submit): the submit loop and the runs together.

Both halves run the same script asking for one H200 GPU, submitted back to back from one client.
The h200 partition holds 16 such jobs at once, so of 20 the last 4 wait for a GPU to come free
(milliseconds for this script; as long as a runner holds it for StarForge). Reference figures
for this tuned cluster, single jobs: ~0.26-0.43 s median latency, ~45 jobs/s end to end without
GPUs (the note "slurm-on-one-machine").

The StarForge half (``--with-starforge``): the same script as N runs through ``sf submit`` on the
Slurm executor (a server of its own, ``executor: slurm``), timed from just before each ``sf
submit`` and, apart, from the server's acceptance of the run. Aim (issue 12): StarForge adds under
0.3 s to Slurm's own start latency and keeps at least half of plain sbatch's throughput.

Usage: .venv/bin/python bench/slurm.py [--jobs 20] [--with-starforge]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
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
SF = [sys.executable, "-m", "starforge.cli.main"]
# Without Pyxis the image is recorded and the runner runs on the node itself. Pinned by digest,
# so admission resolves nothing at a registry (there is none to reach on the bench's machine).
IMAGE = "registry.example/bench:v1@sha256:" + "0" * 64


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


def wait_for_stamps(stamps: Path, keys: list[str]) -> tuple[list[float], list[float]]:
    """Wait (bounded) until every job wrote its end stamp; (starts, ends) in the order of keys."""
    deadline = time.monotonic() + DEADLINE_S
    while missing := [k for k in keys if not (stamps / f"end.{k}").exists()]:
        if time.monotonic() > deadline:
            sys.exit(f"{len(missing)}/{len(keys)} jobs did not end in {DEADLINE_S:.0f}s")
        time.sleep(0.05)

    def read(kind: str) -> list[float]:
        return [float((stamps / f"{kind}.{k}").read_text()) for k in keys]

    return read("start"), read("end")


def sbatch_half(n: int, work: Path) -> dict[str, Any]:
    """N plain sbatch jobs of JOB, one H200 GPU each, submitted back to back."""
    stamps = work / "sbatch"
    stamps.mkdir()
    script = work / "job.sh"
    script.write_text(JOB)
    submitted: list[float] = []
    for i in range(n):
        submitted.append(time.time())
        argv = ["sbatch", "-Q", "--gres=gpu:h200:1", "-o", "/dev/null", "-J", f"bench-{i}"]
        subprocess.run([*argv, str(script), str(stamps), str(i)], check=True, capture_output=True)
    started, ended = wait_for_stamps(stamps, [str(i) for i in range(n)])
    return figures(submitted, started, ended)


def sf(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*SF, *args], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"sf {' '.join(args)} failed ({done.returncode}): {done.stderr or done.stdout}")
    return done


def make_lab(work: Path, stamps: Path) -> Path:
    """A lab whose experiment ``b1`` runs JOB, stamping into ``stamps`` under its run id."""
    lab = work / "lab"
    sf("init", str(lab), "--yes")
    sf("new", "b1", "--method", "custom/custom", cwd=lab)
    exp = lab / "experiments" / "b1"
    (exp / "config.yaml").write_text("starforge:\n  observability: platform\n")
    (exp / "train.sh").write_text(JOB.replace("$1", str(stamps)).replace("$2", "$FORGE_RUN_ID"))
    subprocess.run(["git", "add", "-A"], cwd=lab, check=True)
    subprocess.run(["git", "commit", "-qm", "bench"], cwd=lab, check=True)
    return lab


def starforge_half(n: int, work: Path) -> dict[str, Any]:
    """N runs of JOB (``--profile h200:1``) through ``sf submit`` on the Slurm executor.

    A server of its own (``executor: slurm`` in its server.yaml, its own home); runs submitted
    back to back, each timed from just before its ``sf submit`` (a CLI process: validate, pack,
    upload, admit) and, apart, from the moment the server accepted it (its ``queued`` event).
    """
    home, stamps = work / "sf-home", work / "starforge"
    home.mkdir()
    stamps.mkdir()
    # No container runtime: the job runs on the node as sbatch's does, wherever podman is installed.
    (home / "server.yaml").write_text("executor: slurm\ncontainers: none\n")
    os.environ["STARFORGE_HOME"] = str(home)
    os.environ.pop("STARFORGE_SERVER", None)
    lab = make_lab(work, stamps)
    sf("server", "start")
    try:
        submitted: list[float] = []
        run_ids: list[str] = []
        for _ in range(n):
            submitted.append(time.time())
            got = sf("submit", "b1", "--profile", "h200:1", "--image", IMAGE, "--json", cwd=lab)
            run_ids.append(json.loads(got.stdout)["run_id"])
        started, ended = wait_for_stamps(stamps, run_ids)
        accepted = [queued_at(run_id) for run_id in run_ids]
    finally:
        sf("server", "stop")
    result = figures(submitted, started, ended)
    from_accepted = [s - a for s, a in zip(started, accepted, strict=True)]
    result["start_latency_from_accepted_s"] = {
        "p50": round(percentile(from_accepted, 50), 3),
        "p90": round(percentile(from_accepted, 90), 3),
    }
    return result


def queued_at(run_id: str) -> float:
    """When the server accepted the run: its first ``queued`` event (this machine's clock)."""
    got = json.loads(sf("job", "status", run_id, "--json").stdout)
    first = next(e for e in got["events"] if e["dst"] == "queued")
    return datetime.fromisoformat(str(first["at"]).replace("Z", "+00:00")).timestamp()


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
