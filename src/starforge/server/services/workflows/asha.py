"""ASHA, the early-stopping rule of sweeps, as pure functions (no I/O, no database).

A rung is a step count. A variant *reached* rung S once its metric was reported at a step >= S;
its value at S is the value logged at the latest step <= S (the first one logged when it skipped
past S). Ranking is by value (``min`` or ``max`` mode); a tie goes to the earlier variant.

The rule decides exactly what synchronous successive halving decides, whatever order variants
start, report and end in (quota-bound variants that wait in the queue included). At rung S:

- the *candidates* are the variants promoted at every earlier rung that reached S, plus the
  *pending* ones: not ruled out anywhere, and either still able to report (queued, running,
  paused) or undecided at an earlier rung with a value at S already;
- the rung keeps ``k = max(1, n // keep)`` of its ``n`` candidates (reached + pending);
- a variant that reached S with ``better`` reached variants ranked before it is
  *ruled out* when ``better >= k`` (no later arrival can lift it: ``better`` only grows, ``n``
  only shrinks); *promoted* when ``better + pending < k`` (even if every pending variant reports
  a better value, or fails and shrinks ``k``, it stays in the top ``k``); otherwise it *waits* at
  the rung.

Ruled out and promoted are both final, so each decision is the one the synchronous rule takes
once the whole rung has reported; only its timing depends on the order. A waiting variant is
held (paused by the sweep, its GPUs and quota freed for the variants the rung waits on) and
resumed from its checkpoint once promoted. At the lowest rung with a waiting variant every pending
one can still advance, so holds never deadlock; a variant a user pauses stays pending, and keeps
the rung waiting until it is resumed or stopped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

Mode = Literal["min", "max"]
HOLD_PREFIX = "held by sweep"  # a held variant's reason starts so (its pause keeps it)


@dataclass(frozen=True)
class Variant:
    run_id: str
    index: int  # the variant's place in the grid: ties go to the lower one
    active: bool  # it may still report (queued, running, paused) and the sweep did not stop it
    values: Mapping[int, float] = field(default_factory=dict)  # rung -> value at that rung


@dataclass(frozen=True)
class Stop:
    run_id: str
    rung: int
    value: float
    better: int  # how many variants that reached the rung are better
    kept: int  # how many the rung keeps (k)
    reached: int  # how many variants reached the rung


@dataclass(frozen=True)
class Hold:
    """A variant that waits at ``rung`` until enough of the rung has reported."""

    run_id: str
    rung: int
    value: float
    better: int
    pending: int  # variants the rung still waits on
    kept: int


@dataclass(frozen=True)
class Decision:
    stops: list[Stop]  # active variants to stop, each at the lowest rung that rules it out
    holds: list[Hold]  # active variants to hold at a rung
    out: dict[str, int]  # every variant ruled out (active or not) -> its rung


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


def decide(variants: Sequence[Variant], rungs: Sequence[int], keep: int, mode: Mode) -> Decision:
    """What the sweep does now: the variants to stop, those to hold, all that are ruled out."""
    out: dict[str, int] = {}
    waiting: set[str] = set()  # undecided at a lower rung: pending at every higher one
    stops: list[Stop] = []
    holds: list[Hold] = []
    for rung in sorted(rungs):
        reached = [
            v
            for v in variants
            if v.run_id not in out and v.run_id not in waiting and rung in v.values
        ]
        ids = {v.run_id for v in reached}
        pending = sum(
            1
            for v in variants
            if v.run_id not in out
            and v.run_id not in ids
            and (v.active or (v.run_id in waiting and rung in v.values))
        )
        kept = max(1, (len(reached) + pending) // keep)
        for v in reached:
            better = sum(1 for u in reached if u is not v and _ahead(u, v, rung, mode))
            if better >= kept:
                out[v.run_id] = rung
                if v.active:
                    stops.append(Stop(v.run_id, rung, v.values[rung], better, kept, len(reached)))
            elif better + pending >= kept:
                waiting.add(v.run_id)
                if v.active:
                    holds.append(Hold(v.run_id, rung, v.values[rung], better, pending, kept))
    return Decision(stops, holds, out)


def note(sweep_id: str, metric: str, keep: int, stop: Stop) -> str:
    """The reason a stopped variant shows (status and event log)."""
    return (
        f"early-stopped by sweep {sweep_id} at rung {stop.rung}: {metric}={stop.value:.6g} "
        f"not in top 1/{keep} ({stop.better} of {stop.reached} variants at step {stop.rung} "
        f"are better; the rung keeps {stop.kept})"
    )


def hold_note(sweep_id: str, metric: str, keep: int, hold: Hold) -> str:
    """The reason a held variant shows while it waits at its rung."""
    return (
        f"{HOLD_PREFIX} {sweep_id} at rung {hold.rung}: {metric}={hold.value:.6g}; "
        f"{hold.better} reported better, waiting for {hold.pending} more variant(s) to reach "
        f"step {hold.rung} before deciding whether it is in the top 1/{keep} "
        f"(the rung keeps {hold.kept})"
    )


def promote_note(sweep_id: str, rung: int, keep: int) -> str:
    """The reason a held variant shows once it is promoted and requeued."""
    return f"promoted by sweep {sweep_id} at rung {rung}: in the top 1/{keep}"
