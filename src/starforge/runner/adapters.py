"""Adapters compile a spec into a launch plan (argv, working directory, environment) per node.

One adapter per framework; the registry is closed (an unknown framework is an error, never a
fallback). The methods issue adds verl and NeMo-RL, which compile to their own entry points.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from starforge.catalog.loader import EntrypointKind, Method
from starforge.contract.env import Binding
from starforge.contract.errors import RunnerError
from starforge.contract.jobspec import JobSpec


@dataclass(frozen=True)
class LaunchPlan:
    argv: list[str]
    cwd: Path
    env: dict[str, str]


def _entrypoint_argv(method: Method, exp_dir: Path) -> list[str]:
    script = exp_dir / method.entrypoint.file
    if not script.is_file():
        raise RunnerError(f"the experiment has no {method.entrypoint.file} (expected {script})")
    if method.entrypoint.kind is EntrypointKind.PYTHON:
        return [sys.executable, str(script)]
    return ["bash", str(script)]


def _experiment_file(
    spec: JobSpec, method: Method, binding: Binding, env: dict[str, str]
) -> LaunchPlan:
    exp_dir = Path(binding.work_dir) / spec.exp_dir
    return LaunchPlan(argv=_entrypoint_argv(method, exp_dir), cwd=exp_dir, env=env)


Adapter = Callable[[JobSpec, Method, Binding, dict[str, str]], LaunchPlan]

# TRL methods run the experiment's train.py (it reads its trainer arguments from config.yaml and
# FORGE_HYPERPARAMS); custom runs the experiment's train.sh as it is.
ADAPTERS: dict[str, Adapter] = {"trl": _experiment_file, "custom": _experiment_file}


def compile_plan(
    spec: JobSpec, method: Method, binding: Binding, env: dict[str, str]
) -> LaunchPlan:
    adapter = ADAPTERS.get(method.framework)
    if adapter is None:
        raise RunnerError(
            f"no adapter for framework {method.framework!r} on this runner",
            hint=f"runnable frameworks: {', '.join(ADAPTERS)}",
        )
    return adapter(spec, method, binding, env)
