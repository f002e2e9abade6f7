"""ASHA, the early-stopping rule of sweeps, as pure functions (no I/O, no database).

A rung is a step count. A variant *reached* rung S once its metric was reported at a step >= S;
its value at S is the value logged at the latest step <= S (the first one logged when it skipped
past S). At rung S the variants that reached it are ranked (``min`` or ``max`` mode; a tie goes
to the earlier variant) and those outside the top ``k = max(1, n // keep)`` stop, where ``n``
counts every variant that reached S or still may (an active one below S); a variant stopped at an
earlier rung, or ended before S, never will, so ``n`` only shrinks.

The rule is asynchronous (nothing waits for the slowest variant) and still decides exactly what a
synchronous successive halving would: a variant is stopped only once ``k`` variants that reached
the rung are known to be better, which no later arrival can undo. So the outcome does not depend
on the order in which variants reach a rung, only on their values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

Mode = Literal["min", "max"]


@dataclass(frozen=True)
class Variant:
    run_id: str
    index: int  # the variant's place in the grid: ties go to the lower one
    active: bool  # it may still report (queued or running) and the sweep has not stopped it
    values: Mapping[int, float] = field(default_factory=dict)  # rung -> value at that rung


@dataclass(frozen=True)
class Stop:
    run_id: str
    rung: int
    value: float
    better: int  # how many variants that reached the rung are better
    kept: int  # how many the rung keeps (k)
    reached: int  # how many variants reached the rung


def rung_values(points: Sequence[tuple[int, float]], rungs: Sequence[int]) -> dict[int, float]:
    """Each rung reached by ``points`` ((step, value), any order) and the value there."""
    ordered = sorted(points)
    if not ordered:
        return {}
    last_step = ordered[-1][0]
    out: dict[int, float] = {}
    for rung in rungs:
        if last_step < rung:
            break
        before = [v for s, v in ordered if s <= rung]
        out[rung] = before[-1] if before else ordered[0][1]
    return out


def _ahead(a: Variant, b: Variant, rung: int, mode: Mode) -> bool:
    """Whether ``a`` ranks before ``b`` at ``rung``."""
    va, vb = a.values[rung], b.values[rung]
    if va != vb:
        return va < vb if mode == "min" else va > vb
    return a.index < b.index


def decide(variants: Sequence[Variant], rungs: Sequence[int], keep: int, mode: Mode) -> list[Stop]:
    """The active variants to stop now, each at the lowest rung that rules it out."""
    stops: dict[str, Stop] = {}
    for rung in sorted(rungs):
        reached = [v for v in variants if rung in v.values]
        may = [v for v in variants if rung not in v.values and v.active and v.run_id not in stops]
        kept = max(1, (len(reached) + len(may)) // keep)
        for v in reached:
            if not v.active or v.run_id in stops:
                continue
            better = sum(1 for u in reached if u is not v and _ahead(u, v, rung, mode))
            if better >= kept:
                stops[v.run_id] = Stop(v.run_id, rung, v.values[rung], better, kept, len(reached))
    return list(stops.values())


def note(sweep_id: str, metric: str, keep: int, stop: Stop) -> str:
    """The reason a stopped variant shows (status and event log)."""
    return (
        f"early-stopped by sweep {sweep_id} at rung {stop.rung}: {metric}={stop.value:.6g} "
        f"not in top 1/{keep} ({stop.better} of {stop.reached} variants at step {stop.rung} "
        f"are better; the rung keeps {stop.kept})"
    )
