"""A tiny lab around one trl/* template, run the way the platform runs it (no platform needed).

The template is copied into ``experiments/demo``, ``prepare.py`` builds the tiny model and the
data, and ``train.py`` runs as a subprocess with the job's environment — the composed trainer
arguments in FORGE_CONFIG — offline, on the CPU.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CATALOG = Path(__file__).resolve().parents[2] / "src" / "starforge" / "catalog"


@dataclass(frozen=True)
class TemplateLab:
    root: Path
    method: str  # e.g. "sft": the template is catalog/trl/<method>/template

    @property
    def template(self) -> Path:
        return CATALOG / "trl" / self.method / "template"

    @classmethod
    def create(cls, root: Path, method: str) -> TemplateLab:
        made = cls(root, method)
        (root / "starforge.yaml").write_text("name: demo\n")
        exp = root / "experiments" / "demo"
        shutil.copytree(made.template, exp, ignore=shutil.ignore_patterns("__pycache__"))
        done = subprocess.run(
            [sys.executable, "prepare.py"],
            cwd=exp,
            env=made.env(root / "none"),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return made

    def env(self, out: Path, config: dict[str, Any] | None = None) -> dict[str, str]:
        """The runner's environment; ``config`` is written as the composed FORGE_CONFIG file."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
        data = self.root / "data"
        env.update(
            FORGE_EXP_DIR=str(self.root / "experiments" / "demo"),
            FORGE_OUT_DIR=str(out),
            FORGE_RUN_ID="run-1",
            FORGE_ATTEMPT="1",
            FORGE_MODEL=str(self.root / "models" / "tiny-llama"),
            FORGE_TRAIN_DATA=str(data / f"{self.method}-train.jsonl"),
            FORGE_VALIDATION_DATA=str(data / f"{self.method}-val.jsonl"),
            HF_HUB_OFFLINE="1",
            HF_HOME=str(self.root / ".hf-home"),
            OMP_NUM_THREADS="1",
            PYTHONUNBUFFERED="1",
        )
        if config is not None:
            out.mkdir(parents=True, exist_ok=True)
            path = out.parent / "forge-config.yaml"
            path.write_text(yaml.safe_dump(config))
            env["FORGE_CONFIG"] = str(path)
        return env

    def composed(self, out: Path, **overrides: Any) -> dict[str, Any]:
        """What the platform hands the job: config.yaml, the run's overrides, output_dir."""
        config = yaml.safe_load((self.template / "config.yaml").read_text())
        return {**config, **overrides, "output_dir": str(out / "checkpoints")}


def train(env: dict[str, str]) -> tuple[int, str, str]:
    Path(env["FORGE_OUT_DIR"]).mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [sys.executable, "train.py"],
        cwd=env["FORGE_EXP_DIR"],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    return done.returncode, done.stdout, done.stderr


def logged(output: str, tag: str) -> list[dict[str, Any]]:
    return [json.loads(line[len(tag) :]) for line in output.splitlines() if line.startswith(tag)]
