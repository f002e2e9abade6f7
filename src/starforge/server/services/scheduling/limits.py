"""A user's quota as the scheduler applies it: limits, and what a run needs of them.

Pure functions, no I/O: admission uses :func:`beyond_quota` to reject a run its quota can never
allow; the scheduler uses :class:`Limits` to keep a run waiting while its user's other runs hold
the quota.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from starforge.contract.api import Quota
from starforge.contract.profiles import Pool
from starforge.server.services.scheduling.placement import names


@dataclass(frozen=True)
class Limits:
    """A user's quota as the scheduler applies it (None: no limit)."""

    max_gpus: int | None = None
    max_gpus_per_series: Mapping[str, int] = field(default_factory=dict)
    max_runs: int | None = None
    allowed_profiles: frozenset[str] | None = None

    @classmethod
    def of(cls, quota: Quota) -> Limits:
        allowed = quota.allowed_profiles
        return cls(
            max_gpus=quota.max_gpus,
            max_gpus_per_series=dict(quota.max_gpus_per_series),
            max_runs=quota.max_runs,
            allowed_profiles=frozenset(allowed) if allowed is not None else None,
        )

    @property
    def unlimited(self) -> bool:
        return (
            self.max_gpus is None
            and self.max_runs is None
            and not self.max_gpus_per_series
            and self.allowed_profiles is None
        )


UNLIMITED = Limits()


def run_needs(pools: Iterable[Pool]) -> dict[str, int]:
    """GPUs per series of a run."""
    need: dict[str, int] = {}
    for p in pools:
        need[p.series] = need.get(p.series, 0) + p.total_gpus
    return need


def beyond_quota(pools: Sequence[Pool], limits: Limits) -> str | None:
    """Why ``limits`` can never allow this run, even with none of the user's runs active."""
    if limits.allowed_profiles is not None:
        refused = sorted({p.profile for p in pools} - limits.allowed_profiles)
        if refused:
            allowed = ", ".join(sorted(limits.allowed_profiles)) or "none"
            return f"your quota does not allow profile {names(refused)} (allowed: {allowed})"
    if limits.max_runs == 0:
        return "your quota allows 0 runs at once"
    need = run_needs(pools)
    total = sum(need.values())
    if limits.max_gpus is not None and total > limits.max_gpus:
        return f"the run needs {total} GPUs but your quota allows {limits.max_gpus} at once"
    for series, n in sorted(need.items()):
        cap = limits.max_gpus_per_series.get(series)
        if cap is not None and n > cap:
            return f"the run needs {n} {series} GPUs but your quota allows {cap} at once"
    return None
