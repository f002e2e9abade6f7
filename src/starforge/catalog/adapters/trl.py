"""TRL: the experiment's ``train.py`` reads its trainer arguments from ``$FORGE_CONFIG``.

The resolved arguments (config composed, parameters applied, ``output_dir`` set by the platform)
are written as YAML under the run's state dir, one file per attempt.
"""

from __future__ import annotations

import sys

import yaml

from starforge.catalog.adapters.base import CompileContext, LaunchPlan, platform_config
from starforge.steps import gate


def compile(ctx: CompileContext) -> LaunchPlan:
    config_path = f"{ctx.state_dir}/attempt-{ctx.binding.attempt}.trainer-args.yaml"
    config = platform_config(ctx)
    config.pop(gate.SECTION, None)  # the platform's eval settings, not a trainer argument
    content = yaml.safe_dump(config, sort_keys=True)
    entry = f"{ctx.exp_dir}/{ctx.method.entrypoint.file}"
    env = {**ctx.env, "FORGE_CONFIG": config_path}
    return LaunchPlan(
        argv=[sys.executable, entry], cwd=ctx.exp_dir, env=env, files={config_path: content}
    )
