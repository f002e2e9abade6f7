"""A tiny lab around one trl/* template, run the way the platform runs it (no platform needed).

The template is copied into ``experiments/demo`` by the code of ``sf new`` (with the framework's
shared ``trl_support.py``), ``prepare.py`` builds the tiny model and the
data, and ``train.py`` runs with the job's environment — the composed trainer arguments in
FORGE_CONFIG — offline, on the CPU, forked with the training stack imported as the local
executor runs a trl job (``tests/catalog/preloaded.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from starforge.project import experiments
from starforge.project.lab import Lab
from tests.catalog import preloaded

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
        exp = made.new_experiment("demo")
        code, out, err = preloaded.run("prepare.py", exp, made.env(root / "none"), timeout=120)
        assert code == 0, out + err
        return made

    def new_experiment(self, name: str) -> Path:
        """``experiments/NAME`` as ``sf new NAME --method trl/<method>`` makes it."""
        lab = Lab(root=self.root, name="demo")
        return experiments.new_experiment(lab, name, f"trl/{self.method}").path

    def env(self, out: Path, config: dict[str, Any] | None = None) -> dict[str, str]:
        """The runner's environment; ``config`` is written as the composed FORGE_CONFIG file."""
        env = preloaded.base_env()
        data = self.root / "data"
        env.update(
            FORGE_EXP_DIR=str(self.root / "experiments" / "demo"),
            FORGE_OUT_DIR=str(out),
            FORGE_RUN_ID="run-1",
            FORGE_ATTEMPT="1",
            FORGE_MODEL=str(self.root / "models" / "tiny-llama"),
            FORGE_TRAIN_DATA=str(data / f"{self.method}-train.jsonl"),
            FORGE_VALIDATION_DATA=str(data / f"{self.method}-val.jsonl"),
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
    return preloaded.run("train.py", Path(env["FORGE_EXP_DIR"]), env, timeout=240)


def logged(output: str, tag: str) -> list[dict[str, Any]]:
    return [json.loads(line[len(tag) :]) for line in output.splitlines() if line.startswith(tag)]
