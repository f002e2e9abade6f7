"""The soak's lab: a git project whose experiments are cheap jobs that the checks can read.

``job`` and ``long`` are custom/custom experiments running :data:`JOB` (standard-library
Python, so a start costs little on a loaded machine): it prints ``soak step N/TOTAL`` once per
step, stamps each step with its attempt and the time in ``out/soak-alive.jsonl`` (the job's own
clock, for the no-two-attempts-alive check), checkpoints every few steps and on SIGTERM (exit
143, as the platform's contract asks), resumes from ``FORGE_RESUME_FROM``, and writes
``rows.jsonl`` into ``$FORGE_DATASET_OUT_DIR`` when the run has an ``--output-dataset``. ``sft``
is the trl/sft template with its tiny inputs, for pipelines (``--then export``) and sweeps.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

JOB = r'''"""The soak's job: numbered steps, a checkpoint every 5, stamps on the job's own clock."""
import json, os, signal, sys, time
from pathlib import Path

total, pace = int(sys.argv[1]), float(sys.argv[2])
out = Path(os.environ["FORGE_OUT_DIR"])
attempt = int(os.environ.get("FORGE_ATTEMPT", "1"))
run_id = os.environ.get("FORGE_RUN_ID", "")
ckpts = out / "checkpoints"
ckpts.mkdir(parents=True, exist_ok=True)
stamps = os.open(out / "soak-alive.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
asked_to_stop = False


def on_term(signum, frame):
    global asked_to_stop
    asked_to_stop = True


def save(step):
    tmp = ckpts / f".step-{step}.{os.getpid()}"
    tmp.write_text(f"step={step}\n")
    os.replace(tmp, ckpts / f"step-{step}")


signal.signal(signal.SIGTERM, on_term)
done = 0
resume = os.environ.get("FORGE_RESUME_FROM", "")
if resume:
    done = int(Path(resume).read_text().split("=", 1)[1])
    print(f"[resume] from step {done}", flush=True)
step = done
while step < total:
    if asked_to_stop:
        save(step)
        print(f"[signal] SIGTERM after step {step}: saved", flush=True)
        sys.exit(143)
    time.sleep(pace)
    step += 1
    print(f"soak step {step}/{total}", flush=True)
    stamp = {"attempt": attempt, "step": step, "t": time.time()}
    os.write(stamps, (json.dumps(stamp) + "\n").encode())
    if step % 5 == 0:
        save(step)
save(step)
target = os.environ.get("FORGE_DATASET_OUT_DIR", "")
if target:
    rows = (json.dumps({"run_id": run_id, "row": i}) for i in range(200))
    Path(target, "rows.jsonl").write_text("\n".join(rows) + "\n")
print("[done]", flush=True)
'''

EXPERIMENTS = {"job": (40, 0.15), "long": (120, 0.15)}  # name: (steps, seconds per step)


def sf_env(home: Path, server: str = "", token: str = "") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STARFORGE_")}
    env.update(STARFORGE_HOME=str(home), STARFORGE_WARM_CLIENT="0", HF_HUB_OFFLINE="1")
    env.update(OMP_NUM_THREADS="1")
    if server:
        env.update(STARFORGE_SERVER=server, STARFORGE_TOKEN=token)
    return env


def sf(home: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "starforge.cli.main", *args],
        cwd=cwd,
        env=sf_env(home),
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


def make(root: Path, home: Path, *, trl: bool) -> Path:
    """The lab under ``root`` (``sf`` with ``home``), committed; ``trl`` adds ``sft``."""
    lab = root / "lab"
    sf(home, "init", str(lab), "--yes")
    for name, (steps, pace) in EXPERIMENTS.items():
        sf(home, "new", name, "--method", "custom/custom", cwd=lab)
        folder = lab / "experiments" / name
        (folder / "job.py").write_text(JOB)
        (folder / "train.sh").write_text(
            f'#!/usr/bin/env bash\nexec python3 "$(dirname "$0")/job.py" {steps} {pace}\n'
        )
        (folder / "config.yaml").write_text("starforge:\n  observability: platform\n")
    if trl:
        sf(home, "new", "sft", "--method", "trl/sft", cwd=lab)
        subprocess.run(
            [sys.executable, str(lab / "experiments" / "sft" / "prepare.py"), "--lab", str(lab)],
            cwd=lab,
            check=True,
            capture_output=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
        )
    git(root / "lab", "add", "-A")
    git(root / "lab", "-c", "user.name=soak", "-c", "user.email=soak@example.org",
        "commit", "-qm", "soak lab")  # fmt: skip
    return lab


SFT = [
    "--model", "models/tiny-llama", "--train-data", "data/sft-train.jsonl",
    "--validation-data", "data/sft-val.jsonl", "-s", "logging_steps=1", "-s", "save_steps=2",
    "-s", "eval_steps=1000",
]  # fmt: skip
