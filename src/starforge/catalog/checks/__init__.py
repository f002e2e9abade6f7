"""Framework static checks: rules across several keys that a typo-free config can still break.

Each check reads the run's resolved config (parameters applied) and, when known, the pools the
profile resolved to (so data-parallel sizes are real), and returns the problems it found; each
problem names the keys, their values and the rule. They run locally before a byte is uploaded and
again at admission. A failure is the seed's "batch size validation failure".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starforge.catalog.loader import Method
from starforge.contract.config import MISSING, get_path
from starforge.contract.errors import BatchValidation
from starforge.contract.profiles import Pool


@dataclass(frozen=True)
class CheckContext:
    method: Method
    config: dict[str, Any]
    pools: list[Pool] | None = None  # None: the profile is not known yet (sf validate)

    def value(self, path: str) -> Any:
        """The config's value at ``path``, else the default of the parameter bound there."""
        found = get_path(self.config, path)
        if found is not MISSING:
            return found
        for param in self.method.params.values():
            if param.path == path:
                return param.default
        return None

    def gpus(self, role: str | None = None) -> int | None:
        """GPUs of the pool carrying ``role`` (or of all pools), when the profile is known."""
        if self.pools is None:
            return None
        pools = [p for p in self.pools if role is None or role in p.roles] or self.pools
        return sum(p.total_gpus for p in pools)


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
