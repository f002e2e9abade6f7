"""Experiments: ``experiments/<name>/`` folders of a lab and their method lock.

``method.lock.json`` records which method declaration (id, version, digest) the experiment was
made from; ``sf submit`` sends it and the server compares it with its catalog. The lock is written
only by ``sf new`` (the methods issue adds upgrades); it is never rewritten silently.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from starforge.catalog.loader import Method, get_method
from starforge.contract.errors import ExperimentExists, ExperimentNotFound, ProjectError
from starforge.contract.jobspec import MethodRef
from starforge.contract.names import check_name
from starforge.project.lab import Lab

LOCK_FILE = "method.lock.json"


@dataclass(frozen=True)
class Experiment:
    lab: Lab
    name: str
    method: MethodRef

    @property
    def path(self) -> Path:
        return self.lab.experiments_dir / self.name

    @property
    def relpath(self) -> str:
        return f"experiments/{self.name}"


def list_experiments(lab: Lab) -> list[str]:
    if not lab.experiments_dir.is_dir():
        return []
    return sorted(p.name for p in lab.experiments_dir.iterdir() if (p / LOCK_FILE).is_file())


def load_experiment(lab: Lab, name: str) -> Experiment:
    folder = lab.experiments_dir / name
    if "/" in name or not folder.is_dir():
        known = list_experiments(lab)
        raise ExperimentNotFound(
            f"no experiment {name!r} in {lab.experiments_dir}",
            hint=f"experiments here: {', '.join(known)}"
            if known
            else "create one with `sf new NAME --method trl/grpo`",
        )
    lock_path = folder / LOCK_FILE
    if not lock_path.is_file():
        raise ProjectError(
            f"experiment {name!r} has no {LOCK_FILE}: it does not say which method it uses",
            hint="recreate it with `sf new NAME --method ID`",
        )
    try:
        data = json.loads(lock_path.read_text())
        ref = MethodRef.model_validate(data["method"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ProjectError(
            f"{lock_path} is malformed: {exc}", hint="recreate the experiment with `sf new`"
        ) from exc
    return Experiment(lab=lab, name=name, method=ref)


def write_lock(folder: Path, method: Method) -> None:
    body = {"method": method.ref().model_dump(), "framework": method.framework}
    tmp = folder / (LOCK_FILE + ".tmp")
    tmp.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, folder / LOCK_FILE)


def new_experiment(lab: Lab, name: str, method_id: str) -> Experiment:
    """Create ``experiments/NAME`` from the method's template, atomically."""
    check_name("experiment", name)
    method = get_method(method_id)
    target = lab.experiments_dir / name
    if target.exists():
        raise ExperimentExists(
            f"experiment {name!r} already exists at {target}", hint="pick another name"
        )
    lab.experiments_dir.mkdir(exist_ok=True)
    # Stage beside the target and rename, so a crash never leaves half an experiment.
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=lab.experiments_dir))
    try:
        shutil.copytree(
            method.template_dir,
            staging,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
        write_lock(staging, method)
        os.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return Experiment(lab=lab, name=name, method=method.ref())
