"""custom: the experiment's own ``train.sh``, run as it is with the platform's environment.

An experiment that opted into the platform's curves (``starforge: {observability: platform}`` in
its config.yaml) finds ``starforge.report`` on its path: the runner's Python comes first on
``PATH``, so ``python train.py`` in ``train.sh`` can ``import starforge.report``.
"""

from __future__ import annotations

import os
import sys

from starforge.catalog.adapters.base import CompileContext, LaunchPlan
from starforge.contract import observability


def compile(ctx: CompileContext) -> LaunchPlan:
    entry = f"{ctx.exp_dir}/{ctx.method.entrypoint.file}"
    env = dict(ctx.env)
    if observability.mode_of(ctx.method.observability, ctx.config) == "platform":
        python_dir = os.path.dirname(sys.executable)
        env["PATH"] = os.pathsep.join(p for p in (python_dir, env.get("PATH", "")) if p)
    return LaunchPlan(argv=["bash", entry], cwd=ctx.exp_dir, env=env)
