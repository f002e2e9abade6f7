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
submit`` and, apart, from the server's acceptance of the run. Aim (issue 32): the first line at
most 0.3 s after sbatch's (``starforge.start_latency_from_accepted_s.p50`` against
``sbatch.start_latency_s.p50``).

The sweep (also with ``--with-starforge``, on the same server once those runs ended): one ``sf
sweep submit`` of N variants (``-g learning_rate=...``), how labs submit many runs at once, timed
from just before the CLI to the last variant's end, against the N plain ``sbatch`` jobs of the
anchor half: ``sweep.wall_s``, ``sweep.start_latency_s`` (each variant's first line after the
CLI started), ``sweep.cli_s`` (the CLI's own time) and ``sweep_wall_ratio`` (sweep over sbatch
wall; aim: at most 2). Sweeps need a method with parameters: the variants are ``trl/sft`` runs
whose ``train.py`` stamps as JOB does (it imports no training library), their model and data
tiny files of the project.

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


# The sweep's job: JOB's stamps from Python (trl/sft runs the experiment's train.py).
SWEEP_JOB = """import os, time
stamps, key = {stamps!r}, os.environ["FORGE_RUN_ID"]
with open(f"{{stamps}}/start.{{key}}", "w") as f:
    f.write(repr(time.time()))
with open(f"{{stamps}}/.end.{{key}}", "w") as f:
    f.write(repr(time.time()))
os.rename(f"{{stamps}}/.end.{{key}}", f"{{stamps}}/end.{{key}}")
"""
SWEEP_INPUTS = ["--model", "models/m", "--train-data", "data/t.jsonl"]
SWEEP_INPUTS += ["--validation-data", "data/v.jsonl"]


def make_lab(work: Path, stamps: Path, sweep_stamps: Path) -> Path:
    """A lab whose experiment ``b1`` runs JOB, stamping into ``stamps`` under its run id, and
    whose ``s1`` (trl/sft) runs SWEEP_JOB into ``sweep_stamps``."""
    lab = work / "lab"
    sf("init", str(lab), "--yes")
    sf("new", "b1", "--method", "custom/custom", cwd=lab)
    exp = lab / "experiments" / "b1"
    (exp / "config.yaml").write_text("starforge:\n  observability: platform\n")
    (exp / "train.sh").write_text(JOB.replace("$1", str(stamps)).replace("$2", "$FORGE_RUN_ID"))
    sf("new", "s1", "--method", "trl/sft", cwd=lab)
    (lab / "experiments" / "s1" / "train.py").write_text(SWEEP_JOB.format(stamps=str(sweep_stamps)))
    (lab / "models" / "m").mkdir(parents=True)
    (lab / "models" / "m" / "config.json").write_text('{"model_type": "llama"}\n')
    (lab / "data").mkdir(exist_ok=True)
    for name in ("t", "v"):
        (lab / "data" / f"{name}.jsonl").write_text('{"prompt": "a", "completion": "b"}\n')
    subprocess.run(["git", "add", "-A"], cwd=lab, check=True)
    subprocess.run(["git", "commit", "-qm", "bench"], cwd=lab, check=True)
    return lab


def starforge_half(n: int, work: Path) -> dict[str, Any]:
    """N runs of JOB (``--profile h200:1``) through ``sf submit`` on the Slurm executor.

    A server of its own (``executor: slurm`` in its server.yaml, its own home); runs submitted
    back to back, each timed from just before its ``sf submit`` (a CLI process: validate, pack,
    upload, admit) and, apart, from the moment the server accepted it (its ``queued`` event).
    Then the sweep (:func:`sweep_half`) on the same server; both halves' figures are returned.
    """
    home, stamps, sweep_stamps = work / "sf-home", work / "starforge", work / "sweep"
    for folder in (home, stamps, sweep_stamps):
        folder.mkdir()
    # No container runtime: the job runs on the node as sbatch's does, wherever podman is installed.
    (home / "server.yaml").write_text("executor: slurm\ncontainers: none\n")
    os.environ["STARFORGE_HOME"] = str(home)
    os.environ.pop("STARFORGE_SERVER", None)
    lab = make_lab(work, stamps, sweep_stamps)
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
        swept = sweep_half(n, lab, sweep_stamps)
    finally:
        sf("server", "stop")
    result = figures(submitted, started, ended)
    from_accepted = [s - a for s, a in zip(started, accepted, strict=True)]
    result["start_latency_from_accepted_s"] = {
        "p50": round(percentile(from_accepted, 50), 3),
        "p90": round(percentile(from_accepted, 90), 3),
    }
    return {"starforge": result, "sweep": swept}


def sweep_half(n: int, lab: Path, stamps: Path) -> dict[str, Any]:
    """One ``sf sweep submit`` of ``n`` variants (SWEEP_JOB each), timed from just before it."""
    rates = ",".join(f"{(i + 1) * 1e-5:.5f}" for i in range(n))
    grid = ["-g", f"learning_rate={rates}", "--profile", "h200:1", *SWEEP_INPUTS]
    began = time.time()
    got = json.loads(sf("sweep", "submit", "s1", *grid, "--json", cwd=lab).stdout)
    cli_s = time.time() - began  # validate, pack, upload once, admit every variant
    run_ids = [str(r["run_id"]) for r in got["runs"]]
    started, ended = wait_for_stamps(stamps, run_ids)
    return {**figures([began] * len(run_ids), started, ended), "cli_s": round(cli_s, 3)}


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
            result.update(starforge_half(args.jobs, work))
            sb, sf = result["sbatch"], result["starforge"]
            result["starforge_added_p50_s"] = round(
                sf["start_latency_s"]["p50"] - sb["start_latency_s"]["p50"], 3
            )
            result["throughput_ratio"] = round(sf["completed_per_s"] / sb["completed_per_s"], 2)
            result["sweep_wall_ratio"] = round(result["sweep"]["wall_s"] / sb["wall_s"], 2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
