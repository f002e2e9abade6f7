"""The platform's own overhead of a pause -> resume cycle, excluding the checkpoint I/O.

A custom job on a real embedded server (real runners, the local executor) steps every 50 ms and
stamps, on this machine's clock, when SIGTERM reached it, when its checkpoint was written, and
when its entrypoint started again. For each of N cycles (pause, wait for ``paused``, resume, wait
for the job's next step) the server's events give the rest:

* ``pause_s``: ``pausing`` -> ``paused`` (server clock) minus the job's own save time;
* ``resume_s``: ``queued`` (the resume) -> the resumed job's first line of code;
* ``cycle_s``: their sum: what a pause -> resume costs beyond saving and loading a checkpoint.

Printed beside Slurm's requeue (``scontrol requeue`` -> running again): 10-30 s on this machine
even when tuned. Usage: .venv/bin/python bench/lifecycle.py [--cycles 5]
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

SF = [sys.executable, "-m", "starforge.cli.main"]

# The job: a step every 50 ms; on SIGTERM save a tiny checkpoint and exit 143, stamping the time
# around the save; at start, stamp the time and resume from FORGE_RESUME_FROM.
JOB = r"""#!/usr/bin/env bash
set -euo pipefail
stamp() { python3 -c 'import time; print(repr(time.time()))' >> "$FORGE_OUT_DIR/$1"; }
mkdir -p "$FORGE_OUT_DIR/checkpoints"
stamp "started.$FORGE_ATTEMPT"
step=0
if [[ -n "${FORGE_RESUME_FROM:-}" ]]; then step="$(cat "$FORGE_RESUME_FROM")"; fi
sleeper=""
on_term() {
    [[ -n "$sleeper" ]] && kill "$sleeper" 2>/dev/null || true
    stamp "term.$FORGE_ATTEMPT"
    echo "$step" > "$FORGE_OUT_DIR/checkpoints/step-$step.tmp"
    mv "$FORGE_OUT_DIR/checkpoints/step-$step.tmp" "$FORGE_OUT_DIR/checkpoints/step-$step"
    stamp "saved.$FORGE_ATTEMPT"
    exit 143
}
trap on_term TERM
while true; do
    sleep 0.05 & sleeper=$!; wait "$sleeper"; sleeper=""
    step=$((step + 1))
    echo "step $step"
done
"""


def sf(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SF, *args], cwd=cwd, capture_output=True, text=True, check=True)


def make_lab(root: Path) -> Path:
    lab = root / "lab"
    sf("init", str(lab), "--yes")
    sf("new", "c1", "--method", "custom/custom", cwd=lab)
    exp = lab / "experiments" / "c1"
    (exp / "train.sh").write_text(JOB)
    (exp / "config.yaml").write_text("starforge:\n  observability: platform\n")
    subprocess.run(["git", "add", "-A"], cwd=lab, check=True)
    subprocess.run(["git", "commit", "-qm", "bench"], cwd=lab, check=True)
    return lab


def at(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(event["at"]).replace("Z", "+00:00")).timestamp()


def last(view: Any, dst: str, actor_not: str = "") -> dict[str, Any]:
    events = [e.model_dump(mode="json") for e in view.events]
    return next(e for e in reversed(events) if e["dst"] == dst and e["actor"] != actor_not)


def stamps(out_dir: Path, name: str, attempt: int) -> float:
    path = out_dir / f"{name}.{attempt}"
    deadline = time.monotonic() + 60
    while not path.exists() or not path.read_text().strip():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {path}")
        time.sleep(0.01)
    return float(path.read_text().split()[-1])


def wait_status(client: Any, run_id: str, status: str) -> Any:
    deadline = time.monotonic() + 120
    while True:
        view = client.get_run(run_id)
        if view.status == status:
            return view
        if time.monotonic() > deadline or view.status.is_terminal:
            raise RuntimeError(f"run {run_id} is {view.status}, waited for {status}")
        time.sleep(0.02)


def cycles(client: Any, run_id: str, out_dir: Path, n: int) -> dict[str, list[float]]:
    result: dict[str, list[float]] = {"pause": [], "resume": [], "cycle": [], "save_io": []}
    wait_status(client, run_id, "running")
    for i in range(n):
        attempt = i + 1
        stamps(out_dir, "started", attempt)
        time.sleep(0.3)  # a few steps in
        assert client.pause(run_id).accepted
        view = wait_status(client, run_id, "paused")
        save = stamps(out_dir, "saved", attempt) - stamps(out_dir, "term", attempt)
        pause = at(last(view, "paused")) - at(last(view, "pausing")) - save
        assert client.resume(run_id).accepted
        resumed = last(client.get_run(run_id), "queued", actor_not="auto-retry")
        resume = stamps(out_dir, "started", attempt + 1) - at(resumed)
        result["pause"].append(pause)
        result["resume"].append(resume)
        result["cycle"].append(pause + resume)
        result["save_io"].append(save)
    return result


def summary(samples: list[float]) -> dict[str, float]:
    return {
        "median_s": round(statistics.median(samples), 4),
        "min_s": round(min(samples), 4),
        "max_s": round(max(samples), 4),
        "n": len(samples),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=5)
    args = parser.parse_args()
    from starforge.client import config
    from starforge.client.http import Client

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["STARFORGE_HOME"] = str(Path(tmp) / "home")
        os.environ.pop("STARFORGE_SERVER", None)
        lab = make_lab(Path(tmp))
        sf("server", "start")
        try:
            got = sf("submit", "c1", "--profile", "h200:1", "--image", "reg.example/b:1", "--json",
                     cwd=lab)  # fmt: skip
            run_id = json.loads(got.stdout)["run_id"]
            info = config.read_server_file()
            assert info is not None
            with Client(str(info["url"]), token=config.read_local_token()) as client:
                out_dir = Path(client.get_run(run_id).run_dir) / "out"
                samples = cycles(client, run_id, out_dir, args.cycles)
                client.stop(run_id)
        finally:
            sf("server", "stop")
    print(
        json.dumps(
            {
                "pause_resume_cycle_overhead": {
                    **summary(samples["cycle"]),
                    "anchor_slurm_requeue_s": [10, 30],
                    "aim_s": 1.0,
                },
                "pause_overhead_excluding_save": summary(samples["pause"]),
                "resume_to_entrypoint": summary(samples["resume"]),
                "checkpoint_save_in_job": summary(samples["save_io"]),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
