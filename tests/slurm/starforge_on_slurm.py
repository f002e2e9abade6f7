"""StarForge on the test Slurm cluster: a real server with ``executor: slurm``, started by ``sf``.

Shared by the ``test_executor_*`` modules: a module's server (its own home and settings), labs of
gated jobs (a job waits for a gate file, so a test decides when it ends), and Slurm's own view of
a run's job (``squeue --json``), which the tests compare with what StarForge says.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from starforge.project import experiments
from starforge.project.lab import Lab
from tests.conftest import Result, commit_all
from tests.integration.conftest import embedded_server
from tests.slurm.conftest import wait_for

IMAGE = "registry.example/train:v1"
FINAL = {"succeeded", "failed", "stopped"}
GATED = """#!/usr/bin/env bash
set -euo pipefail
echo "node $NODE_RANK/$NNODES on $SLURMD_NODENAME GPUs=$CUDA_VISIBLE_DEVICES master=$MASTER_ADDR"
for i in $(seq 1 {steps}); do
  echo "step $i"
  [[ -e "{gates}/$FORGE_RUN_ID.fail" ]] && exit 7
  [[ -e "{gates}/$FORGE_RUN_ID" ]] && break
  sleep 0.1
done
echo released
"""
CHECKPOINTING = """#!/usr/bin/env bash
set -euo pipefail
echo "resume_from=${{FORGE_RESUME_FROM:-none}} attempt=$FORGE_ATTEMPT"
trap 'mkdir -p "$FORGE_OUT_DIR/checkpoint-$FORGE_ATTEMPT"; echo checkpointed; exit 143' TERM
while [[ ! -e "{gates}/$FORGE_RUN_ID" ]]; do sleep 0.1 & wait $!; done
echo released
"""


@contextmanager
def slurm_server(home: Path, settings: dict[str, Any]) -> Iterator[Path]:
    """A StarForge server on Slurm in ``home``, for the duration of the block."""
    home.mkdir(parents=True, exist_ok=True)
    with embedded_server(home, {"executor": "slurm", **settings}) as started:
        yield started


def gated_lab(
    new_lab: Callable[..., Lab], gates: Path, script: str = GATED, steps: int = 3000
) -> Lab:
    made = new_lab()
    experiments.new_experiment(made, "g", "custom/custom")
    folder = made.root / "experiments" / "g"
    (folder / "train.sh").write_text(script.format(gates=gates, steps=steps))
    (folder / "config.yaml").write_text("starforge:\n  observability: platform\n")
    (folder / "lab-id.txt").write_text(f"{uuid.uuid4()}\n")
    commit_all(made.root, "a gated job")
    return made


def custom_lab(
    new_lab: Callable[..., Lab], steps: int, step_seconds: float = 0.1, save_every: int = 5
) -> Lab:
    """A lab whose custom job is the template's: steps, checkpoints, SIGTERM saves and exits."""
    made = new_lab()
    experiments.new_experiment(made, "c", "custom/custom")
    folder = made.root / "experiments" / "c"
    script = folder / "train.sh"
    text = script.read_text()
    text = re.sub(r'STEPS="\$\{STEPS:-\d+\}"', f'STEPS="${{STEPS:-{steps}}}"', text)
    text = re.sub(
        r'STEP_SECONDS="\$\{STEP_SECONDS:-[0-9.]+\}"',
        f'STEP_SECONDS="${{STEP_SECONDS:-{step_seconds}}}"',
        text,
    )
    text = re.sub(
        r'SAVE_EVERY="\$\{SAVE_EVERY:-\d+\}"', f'SAVE_EVERY="${{SAVE_EVERY:-{save_every}}}"', text
    )
    script.write_text(text)
    (folder / "config.yaml").write_text("starforge:\n  observability: platform\n")
    (folder / "lab-id.txt").write_text(f"{uuid.uuid4()}\n")
    commit_all(made.root, "a custom job")
    return made


def steps_in(log: str) -> list[int]:
    return [int(m) for m in re.findall(r"(?m)^step (\d+)/\d+ ", log)]


def wait_log(sf: Callable[..., Result], run_id: str, pattern: str, attempt: int = 1) -> str:
    def seen() -> str:
        match = re.search(pattern, logs_of(view(sf, run_id), attempt))
        return match.group(0) if match else ""

    return wait_for(seen, f"{pattern!r} in the log of {run_id} attempt {attempt}")


def act(sf: Callable[..., Result], action: str, run_id: str) -> None:
    got = sf("job", action, run_id, "--json")
    assert got.code == 0, got.err
    body = got.json()
    assert isinstance(body, dict) and body["accepted"], body


def submit(sf: Callable[..., Result], lab: Lab, *profiles: str, exp: str = "g") -> str:
    args = [a for p in profiles for a in ("--profile", p)]
    # The image is recorded; without Pyxis the runner runs on the node itself.
    got = sf("submit", exp, *args, "--image", IMAGE, "--json", cwd=lab.root)
    assert got.code == 0, got.err + got.out
    body = got.json()
    assert isinstance(body, dict)
    return str(body["run_id"])


def view(sf: Callable[..., Result], run_id: str) -> dict[str, Any]:
    got = sf("job", "status", run_id, "--json")
    assert got.code == 0, got.err
    body = got.json()
    assert isinstance(body, dict)
    return body


def wait_status(sf: Callable[..., Result], run_id: str, *statuses: str, deadline_s: float = 120):
    wanted = set(statuses)
    return wait_for(
        lambda: (v := view(sf, run_id))["status"] in wanted and v,
        f"run {run_id} to be {'/'.join(sorted(wanted))}",
        deadline_s,
    )


def release(gates: Path, run_id: str) -> None:
    (gates / run_id).touch()


def logs_of(run: dict[str, Any], attempt: int = 1) -> str:
    folder = Path(str(run["run_dir"]), "logs")
    return "\n".join(p.read_text() for p in sorted(folder.glob(f"attempt-{attempt}*.log")))


def job_ids(run: dict[str, Any]) -> list[int]:
    """The Slurm jobs of a run's attempts, from their references (``slurm:<id>:<rank>,…``)."""
    ids = []
    for attempt in run["attempts"]:
        ref = str(attempt.get("executor_ref") or "")
        ids.append(int(ref.split(",")[0].split(":")[1]) if ref else 0)
    return ids


def slurm_jobs(job_id: int) -> list[dict[str, Any]]:
    """Slurm's records of a job (a heterogeneous job: one per component, in order)."""
    out = subprocess.run(["squeue", "--json"], capture_output=True, text=True, check=True).stdout
    jobs = json.loads(out)["jobs"]
    mine = [j for j in jobs if j["job_id"] == job_id or j.get("het_job_id") == job_id]
    return sorted(mine, key=lambda j: j["job_id"])


def python() -> str:
    return sys.executable
