"""Experiments: ``experiments/<name>/`` folders of a lab and their method lock.

``method.lock.json`` records which method declaration an experiment was made with (id, version,
digest, framework version, runtime) and the parameters its config binds. It is written by
``sf new`` and by an explicit upgrade (``sf submit --upgrade-recipe``), never silently.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from starforge.catalog.loader import Method, get_method
from starforge.catalog.locks import new_lock
from starforge.contract.atomic import write_json_atomic
from starforge.contract.config import compose
from starforge.contract.errors import ExperimentExists, ExperimentNotFound, ProjectError
from starforge.contract.jobspec import MethodRef
from starforge.contract.names import check_name
from starforge.project.lab import Lab

LOCK_FILE = "method.lock.json"
LAB_FILES = "lab"  # template/lab/* goes to the lab root (shared configs), never overwriting


@dataclass(frozen=True)
class Experiment:
    lab: Lab
    name: str
    method: MethodRef | None  # None: the lock is missing or malformed
    lock_error: str = ""

    @property
    def path(self) -> Path:
        return self.lab.experiments_dir / self.name

    @property
    def relpath(self) -> str:
        return f"experiments/{self.name}"


def list_experiments(lab: Lab) -> list[str]:
    if not lab.experiments_dir.is_dir():
        return []
    return sorted(
        p.name for p in lab.experiments_dir.iterdir() if p.is_dir() and not p.name.startswith(".")
    )


def read_lock(folder: Path) -> tuple[MethodRef | None, str]:
    path = folder / LOCK_FILE
    if not path.is_file():
        return None, f"{LOCK_FILE} is missing"
    try:
        # Another sf version may have written it: fields this one does not know are ignored.
        return MethodRef.read(json.loads(path.read_text())["method"]), ""
    except (ValueError, KeyError, TypeError, ValidationError) as exc:
        return None, f"{path} is malformed: {exc}"


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
    ref, error = read_lock(folder)
    return Experiment(lab=lab, name=name, method=ref, lock_error=error)


def write_lock(folder: Path, ref: MethodRef) -> None:
    body = {"method": ref.model_dump(mode="json")}
    write_json_atomic(folder / LOCK_FILE, body, durable=False)


def lab_reader(root: Path) -> Callable[[str], str | None]:
    def read(rel: str) -> str | None:
        path = root / rel
        return path.read_text() if path.is_file() else None

    return read


def composed_config(lab: Lab, name: str, method: Method) -> dict[str, Any]:
    rel = f"experiments/{name}/{method.config.file}"
    if not (lab.root / rel).is_file():
        return {}
    return compose(rel, lab_reader(lab.root))


def lock_experiment(
    lab: Lab, name: str, method: Method, framework_version: str | None = None
) -> MethodRef:
    """(Re)write the experiment's lock against ``method`` as the catalog has it now."""
    ref = new_lock(method, composed_config(lab, name, method), framework_version)
    write_lock(lab.experiments_dir / name, ref)
    return ref


def _copy_lab_files(method: Method, lab: Lab) -> list[str]:
    source = method.template_dir / LAB_FILES
    added = []
    if source.is_dir():
        for path in sorted(p for p in source.rglob("*") if p.is_file()):
            rel = path.relative_to(source)
            target = lab.root / rel
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)
                added.append(rel.as_posix())
    return added


def new_experiment(
    lab: Lab,
    name: str,
    method_id: str | None = None,
    *,
    framework_version: str | None = None,
    source: str | None = None,
) -> Experiment:
    """Create ``experiments/NAME`` from a method's template (with its framework's shared files,
    :attr:`Method.template_dirs`), or fork ``source`` (copied whole)."""
    check_name("experiment", name)
    target = lab.experiments_dir / name
    if target.exists():
        raise ExperimentExists(
            f"experiment {name!r} already exists at {target}", hint="pick another name"
        )
    if source is not None:
        origin = load_experiment(lab, source)
        if origin.method is None:
            raise ProjectError(f"cannot fork {source!r}: {origin.lock_error}")
        method = get_method(origin.method.id)
        # The origin whole: its copy of the framework's shared files too, as it has them.
        sources, ignore = [origin.path], ("outputs", LOCK_FILE)
        framework_version = framework_version or origin.method.framework_version or None
    else:
        method = get_method(method_id or "trl/grpo")
        # The framework's shared files (trl_support.py beside a trl template's train.py), then
        # the method's template: one source in the catalog, a standalone copy in the lab.
        sources, ignore = method.template_dirs, (LAB_FILES,)
    method.runtime_version(framework_version)  # an unknown version fails before any copy
    lab.experiments_dir.mkdir(exist_ok=True)
    # Stage beside the target and rename, so a crash never leaves half an experiment.
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=lab.experiments_dir))
    try:
        for source_dir in sources:
            shutil.copytree(
                source_dir,
                staging,
                dirs_exist_ok=True,
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc", *ignore),
            )
        os.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    try:
        if source is None:
            _copy_lab_files(method, lab)
        ref = lock_experiment(lab, name, method, framework_version)
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    return Experiment(lab=lab, name=name, method=ref)
