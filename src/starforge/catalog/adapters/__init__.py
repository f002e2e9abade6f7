"""Adapters: how a method's run is launched on a node, compiled from spec + binding + config.

Pure functions (no I/O), so ``sf submit --dry-run`` on the laptop and the runner in the job
compile the same launch plan. One adapter per framework, in a closed registry: an unknown
framework is an error, never a fallback. The platform owns outputs and topology: every adapter
writes them over whatever the uploaded config says (:func:`platform_config`).
"""

from __future__ import annotations

from collections.abc import Callable

from starforge.catalog.adapters.base import CompileContext, LaunchPlan, platform_config
from starforge.contract.errors import RunnerError

__all__ = ["CompileContext", "LaunchPlan", "compile_plan", "platform_config"]

Adapter = Callable[[CompileContext], LaunchPlan]


def _registry() -> dict[str, Adapter]:
    from starforge.catalog.adapters import custom, nemo_rl, trl, verl

    return {
        "trl": trl.compile,
        "verl": verl.compile,
        "nemo-rl": nemo_rl.compile,
        "custom": custom.compile,
    }


def compile_plan(ctx: CompileContext) -> LaunchPlan:
    if ctx.spec.step is not None:  # a step run (--then, sf export): a platform program
        from starforge.catalog.adapters import steps

        return steps.compile(ctx)
    adapters = _registry()
    adapter = adapters.get(ctx.method.framework)
    if adapter is None:
        raise RunnerError(
            f"no adapter for framework {ctx.method.framework!r}",
            hint=f"known frameworks: {', '.join(adapters)}",
        )
    return adapter(ctx)
