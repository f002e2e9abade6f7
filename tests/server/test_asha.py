"""ASHA, table-driven: who stops at which rung, whatever order the variants reached it in."""

from __future__ import annotations

import itertools

import pytest

from starforge.server.services.asha import Stop, Variant, decide, note, rung_values


def v(run_id: str, index: int, values: dict[int, float], active: bool = True) -> Variant:
    return Variant(run_id, index, active, values)


SIX_AT_RUNG_1 = [v(f"r{i}", i, {10: float(i)}) for i in range(6)]  # r0 best (min)

CASES = [
    # (what, variants, rungs, keep, mode, stopped {run: rung})
    ("six reached rung 1, keep 1/2: the three worst stop", SIX_AT_RUNG_1, [10], 2, "min",
     {"r3": 10, "r4": 10, "r5": 10}),
    ("max mode keeps the highest", SIX_AT_RUNG_1, [10], 2, "max",
     {"r0": 10, "r1": 10, "r2": 10}),
    ("keep 1/3 of six keeps two", SIX_AT_RUNG_1, [10], 3, "min",
     {"r2": 10, "r3": 10, "r4": 10, "r5": 10}),
    ("the rung waits while the worst cannot be ruled out yet",
     [v("a", 0, {10: 1.0}), v("b", 1, {10: 2.0}), v("c", 2, {}), v("d", 3, {})],
     [10], 2, "min", {}),
    ("two better already reached: the worst is certain to be out",
     [v("a", 0, {10: 1.0}), v("b", 1, {10: 2.0}), v("c", 2, {10: 3.0}), v("d", 3, {})],
     [10], 2, "min", {"c": 10}),
    ("a variant that ended before the rung no longer counts",
     [v("a", 0, {10: 1.0}), v("b", 1, {10: 2.0}), v("c", 2, {}, active=False)],
     [10], 2, "min", {"b": 10}),
    ("ended variants still rank but are never stopped",
     [v("a", 0, {10: 1.0}, active=False), v("b", 1, {10: 2.0}, active=False)],
     [10], 2, "min", {}),
    ("a tie goes to the earlier variant",
     [v("a", 0, {10: 1.0}), v("b", 1, {10: 1.0})], [10], 2, "min", {"b": 10}),
    ("survivors of rung 1 are judged again at rung 2",
     [v("a", 0, {10: 1.0, 20: 0.9}), v("b", 1, {10: 2.0, 20: 0.1}),
      v("c", 2, {10: 3.0}, active=False), v("d", 3, {10: 4.0}, active=False)],
     [10, 20], 2, "min", {"a": 20}),
    ("a variant is stopped at the lowest rung that rules it out",
     [v("a", 0, {10: 1.0, 20: 1.0}), v("b", 1, {10: 2.0, 20: 2.0})], [10, 20], 2, "min",
     {"b": 10}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("variants", "rungs", "keep", "mode", "stopped"),
    [pytest.param(*c[1:], id=c[0]) for c in CASES],
)
def test_asha_stops_exactly_the_variants_outside_the_top_fraction(
    variants: list[Variant], rungs: list[int], keep: int, mode: str, stopped: dict[str, int]
) -> None:
    got = decide(variants, rungs, keep, mode)  # type: ignore[arg-type]
    assert {s.run_id: s.rung for s in got} == stopped


def test_the_outcome_does_not_depend_on_the_order_variants_arrive_in() -> None:
    outcomes = set()
    for order in itertools.permutations(SIX_AT_RUNG_1):
        # Any prefix of arrivals: once all six reached the rung the answer is the same.
        outcomes.add(frozenset(s.run_id for s in decide(list(order), [10], 2, "min")))
        seen = list(order[:3]) + [v(x.run_id, x.index, {}) for x in order[3:]]
        early = {s.run_id for s in decide(seen, [10], 2, "min")}
        assert early <= {"r3", "r4", "r5"}  # never a variant that ends in the top half
    assert outcomes == {frozenset({"r3", "r4", "r5"})}


@pytest.mark.parametrize(
    ("points", "expected"),
    [
        ([], {}),
        ([(5, 3.0)], {}),
        ([(5, 3.0), (10, 2.0), (12, 1.5)], {10: 2.0}),
        ([(8, 3.0), (15, 2.0)], {10: 3.0}),  # the latest value at or before the rung
        ([(15, 2.0), (25, 1.0)], {10: 2.0, 20: 2.0}),  # skipped past: the first value
        ([(30, 1.0), (20, 2.0), (10, 3.0)], {10: 3.0, 20: 2.0, 30: 1.0}),  # any order
    ],
)
def test_a_rung_is_reached_once_the_metric_was_logged_at_or_past_it(
    points: list[tuple[int, float]], expected: dict[int, float]
) -> None:
    assert rung_values(points, [10, 20, 30]) == expected


def test_the_note_names_the_sweep_rung_metric_and_fraction() -> None:
    text = note("s-abc", "loss", 3, Stop("r1", 10, 1.23456789, 2, 2, 6))
    assert text.startswith("early-stopped by sweep s-abc at rung 10: loss=1.23457 not in top 1/3")
