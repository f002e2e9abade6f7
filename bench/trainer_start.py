"""Starting a trl job: the warm trainer's fork beside a fresh interpreter; prints one JSON document.

A real embedded server (local executor, virtual inventory), a lab with the trl/sft template's
tiny model and data, and ``--runs`` submits of a 2-step SFT run, each followed to its end with
``sf submit --follow``. Per run: the wall time of that command (submit, queue, start, the
job's imports, two steps, its checkpoint and exit, the client's follow), and from the attempt's
log the job's own seconds, from the runner's "running:" line to its "exited with code" line
(whole seconds: the log's stamps), and whether the job was forked. Measured twice in one
invocation: with the warm trainer (the default; its first run waits for the trainer's
imports, so it is given apart) and with ``STARFORGE_WARM_TRAINER=0`` (the anchor: every job a
fresh ``python train.py``, as before, and as a Slurm job starts).

Usage: .venv/bin/python bench/trainer_start.py [--runs 4]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _embedded import commit, embedded, sf

ARGS = [
    "--profile",
    "h200:1",
    "--model",
    "models/tiny-llama",
    "--train-data",
    "data/sft-train.jsonl",
    "--validation-data",
    "data/sft-val.jsonl",
    "-s",
    "max_steps=2",
]
STAMP = re.compile(r"^\[starforge (\d\d):(\d\d):(\d\d)\] ")


def lab_with_sft(root: Path) -> Path:
    lab = root / "lab"
    sf("init", str(lab), "--yes")
    sf("new", "s1", "--method", "trl/sft", cwd=lab)
    subprocess.run(
        [sys.executable, "experiments/s1/prepare.py"], cwd=lab, check=True, capture_output=True
    )
    commit(lab)
    return lab


def one_run(lab: Path, home: Path) -> dict[str, Any]:
    logs = set((home / "storage" / "runs").rglob("attempt-1.log"))
    began = time.perf_counter()
    sf("submit", "s1", *ARGS, "--follow", cwd=lab)
    wall = time.perf_counter() - began
    (new,) = set((home / "storage" / "runs").rglob("attempt-1.log")) - logs
    log = new.read_text()
    return {
        "wall_s": round(wall, 3),
        "job_s": _job_seconds(log),
        "forked": "forked with its libraries imported" in log,
        "succeeded": "exited with code 0" in log,
    }


def _job_seconds(log: str) -> int | None:
    """Whole seconds from the runner's "running:" line to its "exited with code" line."""
    started = None
    for line in log.splitlines():
        stamp = STAMP.match(line)
        if not stamp:
            continue
        h, m, s = (int(x) for x in stamp.groups())
        at, said = h * 3600 + m * 60 + s, line[stamp.end() :]
        if said.startswith("running: "):
            started = at
        elif " exited with code " in said and started is not None:
            return at - started
    return None


def series(root: Path, runs: int, warm: bool) -> list[dict[str, Any]]:
    os.environ["STARFORGE_WARM_TRAINER"] = "1" if warm else "0"
    with embedded(root / ("warm" if warm else "fresh")) as home:
        lab = lab_with_sft(root / ("lab-warm" if warm else "lab-fresh"))
        return [one_run(lab, home) for _ in range(runs)]


def summary(samples: list[dict[str, Any]]) -> dict[str, Any]:
    walls = [s["wall_s"] for s in samples]
    jobs = [g for s in samples if (g := s["job_s"]) is not None]
    return {
        "wall_median_s": round(statistics.median(walls), 3) if walls else None,
        "job_median_s": statistics.median(jobs) if jobs else None,
        "forked": sum(s["forked"] for s in samples),
        "succeeded": sum(s["succeeded"] for s in samples),
        "runs": samples,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ["STARFORGE_WARM_CLIENT"] = "0"  # the client's start is not what is measured
    with tempfile.TemporaryDirectory(prefix="sf-bench-trainer-") as tmp:
        warm = series(Path(tmp), args.runs + 1, warm=True)
        fresh = series(Path(tmp), args.runs, warm=False)
    print(
        json.dumps(
            {
                "warm_trainer": {"first_run": warm[0], **summary(warm[1:])},
                "fresh_interpreter": summary(fresh),
                "load": [round(x, 2) for x in os.getloadavg()],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
