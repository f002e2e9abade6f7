"""Wall time of `sf ls` and `sf validate EXP` in a lab of 20 experiments; prints one JSON document.

Side by side with the public StarForge client on this machine (0.96 s for `sf ls`, 1.0 s for
`sf validate`); the aim is a third of that. Each sample is a fresh `sf` process, as a user runs it.

Usage: .venv/bin/python bench/methods_cli.py [--runs 10]
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

METHODS = ["trl/grpo", "trl/sft", "trl/dpo", "custom/custom"]


def sf_bin() -> str:
    return str(Path(sys.executable).with_name("sf"))


def make_lab(root: Path, count: int) -> Path:
    lab = root / "lab"
    subprocess.run([sf_bin(), "init", str(lab), "--yes"], check=True, capture_output=True)
    for i in range(count):
        subprocess.run(
            [sf_bin(), "new", f"exp{i:02d}", "--method", METHODS[i % len(METHODS)]],
            cwd=lab,
            check=True,
            capture_output=True,
        )
    return lab


def timed(args: list[str], cwd: Path, runs: int) -> dict[str, float]:
    samples = []
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run([sf_bin(), *args], cwd=cwd, check=True, capture_output=True)
        samples.append(time.perf_counter() - began)
    return {
        "median_s": round(statistics.median(samples), 4),
        "min_s": round(min(samples), 4),
        "max_s": round(max(samples), 4),
        "n": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--experiments", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        lab = make_lab(Path(tmp), args.experiments)
        print(
            json.dumps(
                {
                    "experiments": args.experiments,
                    "sf_ls": {**timed(["ls"], lab, args.runs), "anchor_starforge_client_s": 0.96},
                    "sf_validate": {
                        **timed(["validate", "exp00"], lab, args.runs),
                        "anchor_starforge_client_s": 1.0,
                    },
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
