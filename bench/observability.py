"""Benchmarks of observability; prints one JSON document.

One real embedded server and one real custom run (which opted into the platform's curves):

* ``report_log_overhead_us``: per-call cost of ``starforge.report.log()`` (5 metrics a call)
  inside a training-like loop in the job, with the real sender thread sending to the server;
  measured as (loop with log - the same loop without) / calls. Aim: under 5 us.
* ``ingest_points_per_s``: points stored per second through the real ingest API (HTTP on
  127.0.0.1, JSON body, upsert into SQLite), batches of ``--batch`` points sent back to back by
  one client. Aim: above 200,000/s.
* ``log_follow_latency_ms``: from a line printed by the job (its own timestamp in the line) to
  the same line printed by ``sf job logs`` (a separate process reading the SSE stream). Aim:
  under 250 ms; beside the public StarForge client's forwarder (batches for 1 s) and Ray's tail
  (about 2 s late).

Usage: .venv/bin/python bench/observability.py [--batches 40] [--batch 10000] [--ticks 40]
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
from pathlib import Path
from typing import Any

import httpx

SF = [sys.executable, "-m", "starforge.cli.main"]

JOB = r"""#!/usr/bin/env bash
set -euo pipefail
python - <<'PY'
import json, math, os, time
from pathlib import Path
import starforge.report as report

out = Path(os.environ["FORGE_OUT_DIR"])
def wait_for(name):
    while not (out / name).exists():
        time.sleep(0.02)

wait_for("go-overhead")
report.init()
calls = 200_000
def loop(with_log):
    x = 0.0
    began = time.perf_counter()
    for step in range(calls):
        x = math.sin(x + step)  # a stand-in for a training step's own Python work
        if with_log:
            report.log({"loss": x, "reward": -x, "lr": 1e-5, "norm": 0.5, "kl": 0.01}, step=step)
    return time.perf_counter() - began
samples = []
for _ in range(5):
    bare, logged = loop(False), loop(True)
    samples.append((logged - bare) / calls * 1e6)
report.flush(60)
print("[bench-overhead] " + json.dumps({"samples_us": samples, "calls": calls}), flush=True)

wait_for("go-ticks")
for i in range(int(os.environ.get("TICKS", "40"))):
    print(f"tick {i} {time.time():.6f}", flush=True)
    time.sleep(0.1)
print("done", flush=True)
PY
"""


def sf(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run([*SF, *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def make_lab(root: Path, ticks: int) -> Path:
    sf("init", str(root / "lab"), "--yes")
    lab = root / "lab"
    sf("new", "obs", "--method", "custom/custom", cwd=lab)
    folder = lab / "experiments" / "obs"
    (folder / "train.sh").write_text(JOB.replace('"TICKS", "40"', f'"TICKS", "{ticks}"'))
    (folder / "config.yaml").write_text("starforge:\n  observability: platform\n")
    subprocess.run(["git", "add", "-A"], cwd=lab, check=True)
    subprocess.run(["git", "commit", "-qm", "bench"], cwd=lab, check=True)
    return lab


def wait_status(run_id: str, wanted: set[str], limit_s: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + limit_s
    while True:
        view: dict[str, Any] = json.loads(sf("job", "status", run_id, "--json"))
        if view["status"] in wanted or time.monotonic() > deadline:
            return view
        time.sleep(0.1)


def ingest(url: str, run_id: str, token: str, batches: int, size: int) -> dict[str, Any]:
    keys = [f"bench/k{i}" for i in range(10)]
    bodies = []
    for b in range(batches):
        steps = [
            {"step": b * (size // 10) + s, "t": 0.0, "values": {k: s * 0.001 for k in keys}}
            for s in range(size // 10)
        ]
        bodies.append(json.dumps({"attempt": 1, "steps": steps}).encode())
    headers = {"X-StarForge-Run-Token": token, "Content-Type": "application/json"}
    with httpx.Client(base_url=url + "/api/v1", headers=headers, timeout=120) as client:
        client.post(f"/runs/{run_id}/ingest", content=bodies[0]).raise_for_status()  # warm up
        began = time.perf_counter()
        stored = 0
        for body in bodies:
            resp = client.post(f"/runs/{run_id}/ingest", content=body)
            resp.raise_for_status()
            stored += resp.json()["stored"]
        elapsed = time.perf_counter() - began
    return {
        "points_per_s": round(stored / elapsed),
        "points": stored,
        "batch_points": size,
        "seconds": round(elapsed, 3),
        "aim_above": 200_000,
    }


def follow_latency(run_id: str, out_dir: Path) -> dict[str, Any]:
    follower = subprocess.Popen(
        [*SF, "job", "logs", run_id, "-n", "0"], stdout=subprocess.PIPE, text=True, bufsize=1
    )
    assert follower.stdout is not None
    time.sleep(1.0)  # let it connect and print the history
    (out_dir / "go-ticks").touch()
    latencies = []
    for line in follower.stdout:
        arrived = time.time()
        if line.startswith("tick "):
            latencies.append((arrived - float(line.split()[2])) * 1000)
    follower.wait(timeout=60)
    latencies.sort()
    return {
        "median_ms": round(statistics.median(latencies), 1),
        "p95_ms": round(latencies[int(len(latencies) * 0.95) - 1], 1),
        "max_ms": round(latencies[-1], 1),
        "n": len(latencies),
        "aim_below_ms": 250,
        "anchor_starforge_client_forwarder_ms": 1000,
        "anchor_ray_tail_ms": 2000,
    }


def overhead(run_dir: Path) -> dict[str, Any]:
    (run_dir / "out" / "go-overhead").touch()
    deadline = time.monotonic() + 300
    log = run_dir / "logs" / "attempt-1.log"
    while time.monotonic() < deadline:
        time.sleep(0.5)  # read the file itself: no process to start while the job measures
        for line in log.read_text().splitlines():
            if line.startswith("[bench-overhead] "):
                got = json.loads(line.removeprefix("[bench-overhead] "))
                samples = got["samples_us"]
                return {
                    "median_us": round(statistics.median(samples), 3),
                    "min_us": round(min(samples), 3),
                    "max_us": round(max(samples), 3),
                    "calls_per_sample": got["calls"],
                    "metrics_per_call": 5,
                    "aim_below_us": 5,
                }
    raise RuntimeError("the job did not report its overhead figures")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--ticks", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["STARFORGE_HOME"] = str(Path(tmp) / "home")
        os.environ.pop("STARFORGE_SERVER", None)
        lab = make_lab(Path(tmp), args.ticks)
        sf("server", "start")
        try:
            url = json.loads(sf("server", "status", "--json"))["url"]
            submitted = sf(
                "submit",
                "obs",
                "--profile",
                "h200:1",
                "--image",
                "reg.example/b:1",
                "--json",
                cwd=lab,
            )
            run_id = json.loads(submitted)["run_id"]
            view = wait_status(run_id, {"running", "failed", "succeeded"})
            run_dir = Path(view["run_dir"])
            binding = json.loads((run_dir / "state" / "attempt-1.node-0.binding.json").read_text())
            figures = {
                "ingest_points_per_s": ingest(
                    url, run_id, binding["run_token"], args.batches, args.batch
                ),
                "report_log_overhead_us": overhead(run_dir),
                "log_follow_latency_ms": follow_latency(run_id, run_dir / "out"),
            }
            figures["run_status"] = wait_status(run_id, {"succeeded", "failed"})["status"]
        finally:
            sf("server", "stop")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
