"""Benchmarks of the walking skeleton; prints one JSON document.

* ``sf --help`` wall time (median of N runs, a fresh process each), beside the public StarForge
  client's 0.28 s on this machine;
* submit-to-running latency on an idle embedded server: from the run's ``queued`` event to its
  ``running`` event (server clock), and from the CLI's start to ``running`` observed; beside
  Slurm's 0.26 s from ``sbatch`` to start on an idle, tuned cluster (2.2 s by default).

Usage: .venv/bin/python bench/walking_skeleton.py [--runs 10]
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

SF = [sys.executable, "-m", "starforge.cli.main"]


def sf(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SF, *args], cwd=cwd, capture_output=True, text=True, check=True)


def time_help(runs: int) -> list[float]:
    sf_bin = Path(sys.executable).with_name("sf")
    samples = []
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run([str(sf_bin), "--help"], capture_output=True, check=True)
        samples.append(time.perf_counter() - began)
    return samples


def make_lab(root: Path) -> Path:
    sf("init", str(root / "lab"), "--yes")
    lab = root / "lab"
    sf("new", "c1", "--method", "custom/custom", cwd=lab)
    script = lab / "experiments" / "c1" / "train.sh"
    script.write_text("#!/usr/bin/env bash\necho hello\n")
    subprocess.run(["git", "add", "-A"], cwd=lab, check=True)
    subprocess.run(["git", "commit", "-qm", "bench"], cwd=lab, check=True)
    return lab


def event_time(view: dict[str, object], status: str) -> datetime:
    events = view["events"]
    assert isinstance(events, list)
    return datetime.fromisoformat(next(e["at"] for e in events if e["dst"] == status))


def submit_to_running(lab: Path, runs: int) -> dict[str, list[float]]:
    server_side, client_side = [], []
    for _ in range(runs):
        began = time.perf_counter()
        run_id = json.loads(
            sf(
                "submit",
                "c1",
                "--profile",
                "h200:1",
                "--image",
                "registry.example/bench:1",
                "--observability-url",
                "https://wandb.example/bench",
                "--json",
                cwd=lab,
            ).stdout
        )["run_id"]
        while True:
            view = json.loads(sf("job", "status", run_id, "--json").stdout)
            if view["status"] in {"running", "succeeded", "failed"}:
                break
            time.sleep(0.01)
        client_side.append(time.perf_counter() - began)
        server_side.append(
            (event_time(view, "running") - event_time(view, "queued")).total_seconds()
        )
    return {"server": server_side, "client": client_side}


def summary(samples: list[float]) -> dict[str, float]:
    return {
        "median_s": round(statistics.median(samples), 4),
        "min_s": round(min(samples), 4),
        "max_s": round(max(samples), 4),
        "n": len(samples),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["STARFORGE_HOME"] = str(Path(tmp) / "home")
        os.environ.pop("STARFORGE_SERVER", None)
        help_samples = time_help(args.runs)
        lab = make_lab(Path(tmp))
        sf("server", "start")
        try:
            latency = submit_to_running(lab, args.runs)
        finally:
            sf("server", "stop")
    print(
        json.dumps(
            {
                "sf_help": {**summary(help_samples), "anchor_starforge_client_s": 0.28},
                "submit_to_running_server_clock": {
                    **summary(latency["server"]),
                    "anchor_slurm_tuned_s": 0.26,
                    "anchor_slurm_default_s": 2.2,
                },
                "submit_to_running_cli_observed": summary(latency["client"]),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
