"""custom: the experiment's own ``train.sh``, run as it is with the platform's environment."""

from __future__ import annotations

from starforge.catalog.adapters.base import CompileContext, LaunchPlan


def compile(ctx: CompileContext) -> LaunchPlan:
    entry = f"{ctx.exp_dir}/{ctx.method.entrypoint.file}"
    return LaunchPlan(argv=["bash", entry], cwd=ctx.exp_dir, env=dict(ctx.env))
