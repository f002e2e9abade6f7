"""The launch plan compiled by the server at dispatch, for a runner that starts its job at once.

A cold runner (Slurm's ``srun`` starts one per node) spends most of its start importing the
catalog and the HTTP client before its job's first line. The server has both loaded, so for a
node that has nothing to decide before its job starts it compiles the plan with the runner's own
adapters and writes it into the binding (:class:`~starforge.contract.env.PlannedLaunch`); the
runner starts the job from it and imports the rest afterwards (``runner/quick.py``).

A node needs its own compile, and gets no plan, when its start depends on more than the spec
and the binding: datasets fetched or staged, secrets fetched, an image pulled, another user's
folders handed over, a step run, or several processes (the launcher's rendezvous uses Slurm's
master address). The runtime's package pins go with the plan: the runner checks them before the
job starts, as its own compile does. Only adapters that read nothing of the runner's environment
but ``PATH`` are compiled here (``custom``, ``trl``).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from starforge.catalog.adapters import CompileContext, compile_plan
from starforge.catalog.loader import Method
from starforge.contract.datasets import resolved_of
from starforge.contract.env import Binding, PlannedLaunch, job_env
from starforge.contract.jobspec import JobSpec
from starforge.contract.secrets import merge_requests, parse_config_secrets

# Adapters whose plan depends on the runner's environment through PATH alone.
PLANNED_FRAMEWORKS = ("custom", "trl")


def _needs_node(spec: JobSpec, b: Binding, config: dict[str, Any]) -> bool:
    """Whether the node must decide something before its job starts (see the module's note)."""
    try:
        secrets = merge_requests(parse_config_secrets(config), spec.secrets)
    except ValueError:
        return True
    return bool(
        spec.step is not None
        or spec.output_dataset
        or resolved_of(config)
        or secrets
        or (b.image and b.containers == "podman")
        or b.job_user
        or b.job_uids
        or b.tls_ca
        or b.world_size > 1
    )


def precompile(
    spec: JobSpec, method: Method, b: Binding, config: dict[str, Any] | None
) -> PlannedLaunch | None:
    """The plan of ``b``'s node, as its runner would compile it with this interpreter and this
    ``PATH``; None when the node needs its own compile."""
    if config is None or method.framework not in PLANNED_FRAMEWORKS or _needs_node(spec, b, config):
        return None
    path = os.environ.get("PATH", "")
    env = {"PATH": path, **job_env(spec, b)}
    plan = compile_plan(CompileContext(spec=spec, method=method, binding=b, env=env, config=config))
    if plan.launcher:
        return None
    packages: list[str] = []
    if spec.method.framework_version:
        packages = list(method.runtime_version(spec.method.framework_version)[1].packages)
    return PlannedLaunch(
        argv=plan.argv,
        cwd=plan.cwd,
        env=plan.env,
        files=plan.files,
        packages=packages,
        python=sys.executable,
        path=path,
    )
