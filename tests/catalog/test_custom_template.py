"""The custom/custom template's train.sh follows the custom-job contract it documents."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

TRAIN_SH = (
    Path(__file__).resolve().parents[2]
    / "src"
    / "starforge"
    / "catalog"
    / "custom"
    / "custom"
    / "template"
    / "train.sh"
)


def job_env(out: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FORGE_", "STEP"))}
    env.update(FORGE_OUT_DIR=str(out), FORGE_RUN_ID="run-1", FORGE_ATTEMPT="1", NNODES="1")
    env.update(extra)
    return env


def run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(TRAIN_SH)], env=env, capture_output=True, text=True, timeout=30
    )


def step_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("step ")]


def checkpoints(out: Path) -> list[str]:
    return sorted(p.name for p in (out / "checkpoints").iterdir())


def test_runs_its_steps_prints_topology_and_checkpoints_every_5_steps(tmp_path: Path) -> None:
    out = tmp_path / "out"

    done = run(job_env(out, STEPS="6", STEP_SECONDS="0.01"))

    assert done.returncode == 0, done.stderr
    assert "FORGE_RUN_ID=run-1" in done.stdout and "NNODES=1" in done.stdout
    lines = step_lines(done.stdout)
    assert [line.split()[1] for line in lines] == [f"{n}/6" for n in range(1, 7)]
    assert all(line.split()[2] == "loss" and float(line.split()[3]) > 0 for line in lines)
    assert checkpoints(out) == ["step-5", "step-6"]
    assert (out / "checkpoints" / "step-5").read_text().startswith("step=5\n")


def test_sigterm_checkpoints_exits_143_and_a_rerun_resumes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = job_env(out, STEPS="8", STEP_SECONDS="0.2")
    proc = subprocess.Popen(
        ["bash", str(TRAIN_SH)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("step 3/"):
            proc.send_signal(signal.SIGTERM)
            break
    rest, _ = proc.communicate(timeout=2)  # reacts within a second, mid-sleep

    assert proc.returncode == 143
    last = step_lines("".join(seen) + rest)[-1].split()[1].split("/")[0]
    assert checkpoints(out) == [f"step-{last}"]

    again = run({**env, "STEP_SECONDS": "0.01"})

    assert again.returncode == 0, again.stderr
    assert f"[resume] from {out}/checkpoints/step-{last}" in again.stdout
    resumed = [line.split()[1] for line in step_lines(again.stdout)]
    assert resumed == [f"{n}/8" for n in range(int(last) + 1, 9)]
    assert checkpoints(out)[-1] == "step-8"


def test_resumes_from_the_numerically_latest_or_the_given_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "checkpoints").mkdir(parents=True)
    for n in (5, 10, 9):  # as text, step-9 sorts last; as numbers, step-10 is the latest
        (out / "checkpoints" / f"step-{n}").write_text(f"step={n}\n")
    given = str(out / "checkpoints" / "step-9")

    latest = run(job_env(out, STEPS="11", STEP_SECONDS="0"))
    chosen = run(job_env(out, STEPS="11", STEP_SECONDS="0", FORGE_RESUME_FROM=given))
    missing = run(job_env(out, FORGE_RESUME_FROM=str(out / "nope")))

    assert latest.returncode == 0 and step_lines(latest.stdout) == ["step 11/11 loss 0.6030"]
    assert chosen.returncode == 0
    assert [line.split()[1] for line in step_lines(chosen.stdout)] == ["10/11", "11/11"]
    assert missing.returncode == 2
    assert missing.stderr.startswith("train.sh: error:") and "nope" in missing.stderr
