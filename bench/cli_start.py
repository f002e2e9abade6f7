"""Wall time of `sf --help` against the public StarForge client's `sf --help`; prints JSON.

Each sample is a fresh process, as a user runs it; the two commands alternate so that a busy
machine slows both alike. The anchor is `starforge-core` from PyPI in its own virtual
environment (`python -m venv DIR && DIR/bin/pip install starforge-core`), given by --anchor.
The aim: our median at most 0.5 of the anchor's.

Usage: .venv/bin/python bench/cli_start.py --anchor /path/to/venv/bin/sf [--runs 21]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def sample(argv: list[str], env: dict[str, str] | None = None) -> float:
    began = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, env=env)
    return time.perf_counter() - began


def summary(samples: list[float]) -> dict[str, float]:
    return {
        "median_s": round(statistics.median(samples), 4),
        "min_s": round(min(samples), 4),
        "max_s": round(max(samples), 4),
        "n": len(samples),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--anchor", required=True, help="the public client's `sf` executable")
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    ours_argv = [sys.executable, "-m", "starforge.cli.main", "--help"]
    anchor_argv = [args.anchor, "--help"]
    # The anchor has its own `starforge` package: never let our PYTHONPATH shadow it.
    anchor_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    sample(ours_argv)  # warm the page cache and .pyc files
    sample(anchor_argv, anchor_env)
    ours: list[float] = []
    anchor: list[float] = []
    for _ in range(args.runs):
        ours.append(sample(ours_argv))
        anchor.append(sample(anchor_argv, anchor_env))
    figures = {
        "sf_help": summary(ours),
        "anchor_starforge_core_help": summary(anchor),
        "ratio_of_medians": round(statistics.median(ours) / statistics.median(anchor), 3),
        "aim_ratio": 0.5,
    }
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
