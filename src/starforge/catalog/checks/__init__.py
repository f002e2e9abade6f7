"""Framework static checks: rules across several keys that a typo-free config can still break.

Each check reads the run's resolved config (parameters applied) and, when known, the pools the
profile resolved to (so data-parallel sizes are real), and returns the problems it found; each
problem names the keys, their values and the rule. They run locally before a byte is uploaded and
again at admission. A failure is the seed's "batch size validation failure".
"""

from __future__ import annotations

from collections.abc import Callable

from starforge.catalog.checks.context import CheckContext
from starforge.contract.errors import BatchValidation

__all__ = ["Check", "CheckContext", "run_checks"]


Check = Callable[[CheckContext], list[str]]


def _registry() -> dict[str, Check]:
    from starforge.catalog.checks import nemo_rl, trl, verl

    return {**trl.CHECKS, **verl.CHECKS, **nemo_rl.CHECKS}


def run_checks(ctx: CheckContext) -> None:
    checks = _registry()
    problems: list[str] = []
    for name in ctx.method.checks:
        check = checks.get(name)
        if check is None:
            raise KeyError(f"{ctx.method.id} names an unknown check {name!r}")
        problems.extend(check(ctx))
    if problems:
        raise BatchValidation(
            f"batch size validation failed for {ctx.method.id}: " + "; ".join(problems),
            hint="change the values with -s KEY=VALUE or in the experiment's config",
            details={"problems": problems},
        )
