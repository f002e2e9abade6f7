"""ASHA, table-driven: who stops at which rung, whatever order the variants reached it in."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from starforge.server.services.workflows.asha import Mode, Stop, Variant, decide, note, rung_values


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
    assert {s.run_id: s.rung for s in got.stops} == stopped


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


HOLD_CASES = [
    # (what, variants, rungs, keep, held {run: rung})
    ("two of four reached, keep 1/2: neither is sure to be in or out, both wait",
     [v("a", 0, {10: 1.0}), v("b", 1, {10: 2.0}), v("c", 2, {}), v("d", 3, {})],
     [10], 2, {"a": 10, "b": 10}),
    ("the best of four with one pending is sure to be in the top two",
     [v("a", 0, {10: 1.0}), v("b", 1, {10: 2.0}), v("c", 2, {10: 3.0}), v("d", 3, {})],
     [10], 2, {"b": 10}),
    ("a variant waiting at rung 1 with a value at rung 2 is pending there, not ranked",
     [v("a", 0, {10: 1.0, 20: 5.0}), v("b", 1, {10: 2.0, 20: 0.1}), v("c", 2, {}),
      v("d", 3, {})], [10, 20], 2, {"a": 10, "b": 10}),
    ("a paused variant that has not reported keeps the rung waiting",
     [v("a", 0, {10: 1.0}), v("b", 1, {10: 2.0}), v("c", 2, {10: 3.0}),
      v("d", 3, {10: 4.0}), v("e", 4, {})], [10], 2, {"b": 10}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("variants", "rungs", "keep", "held"), [pytest.param(*c[1:], id=c[0]) for c in HOLD_CASES]
)
def test_a_variant_neither_sure_in_nor_sure_out_waits_at_its_rung(
    variants: list[Variant], rungs: list[int], keep: int, held: dict[str, int]
) -> None:
    got = decide(variants, rungs, keep, "min")
    assert {h.run_id: h.rung for h in got.holds} == held


# ---- order independence: a simulated sweep against synchronous successive halving ----------


@dataclass(frozen=True)
class Trajectory:
    values: tuple[float, ...]  # its value at each rung it reaches, lowest rung first
    ends_after: int  # how many rungs it reaches before it ends (crash, or the training is done)


def synchronous(trajs: list[Trajectory], rungs: list[int], keep: int, mode: Mode) -> dict[str, int]:
    """Successive halving with the whole rung known at once: who is ruled out at which rung."""
    alive = list(range(len(trajs)))
    out: dict[str, int] = {}
    sign = 1.0 if mode == "min" else -1.0
    for r, rung in enumerate(rungs):
        reached = sorted(
            (i for i in alive if trajs[i].ends_after > r),
            key=lambda i: (sign * trajs[i].values[r], i),
        )
        kept = max(1, len(reached) // keep)
        out.update({f"r{i}": rung for i in reached[kept:]})
        alive = reached[:kept]
    return out


class Sweep:
    """Variants that report rung by rung in an order the caller picks, under ASHA's decisions."""

    def __init__(self, trajs: list[Trajectory], rungs: list[int], keep: int, mode: Mode) -> None:
        self.trajs, self.rungs, self.keep, self.mode = trajs, rungs, keep, mode
        self.reported = [0] * len(trajs)
        self.active = [True] * len(trajs)
        self.held: set[int] = set()
        self.stopped: dict[str, int] = {}
        self.out: dict[str, int] = {}

    def variants(self) -> list[Variant]:
        return [
            Variant(
                f"r{i}",
                i,
                self.active[i],
                {self.rungs[r]: t.values[r] for r in range(self.reported[i])},
            )
            for i, t in enumerate(self.trajs)
        ]

    def movable(self, overshoot: bool) -> list[int]:
        return [i for i, a in enumerate(self.active) if a and (overshoot or i not in self.held)]

    def advance(self, i: int) -> None:
        """Variant ``i`` reports its next rung, or ends after its last one; ASHA decides."""
        if self.reported[i] < self.trajs[i].ends_after:
            self.reported[i] += 1
        else:
            self.active[i] = False
        got = decide(self.variants(), self.rungs, self.keep, self.mode)
        for stop in got.stops:
            self.active[int(stop.run_id[1:])] = False
            self.stopped[stop.run_id] = stop.rung
        self.held = {int(h.run_id[1:]) for h in got.holds}
        self.out = got.out


@st.composite
def sweeps(draw: st.DrawFn) -> tuple[list[Trajectory], list[int], int, Mode]:
    rungs = [10 * (r + 1) for r in range(draw(st.integers(1, 3)))]
    values = st.integers(0, 6).map(float)  # few values: ties happen
    trajs = [
        Trajectory(
            tuple(draw(st.lists(values, min_size=len(rungs), max_size=len(rungs)))),
            draw(st.integers(0, len(rungs))),
        )
        for _ in range(draw(st.integers(1, 8)))
    ]
    return trajs, rungs, draw(st.integers(2, 4)), draw(st.sampled_from(["min", "max"]))


@given(sweeps(), st.data(), st.booleans())
def test_asha_rules_out_what_synchronous_halving_does_whatever_the_arrival_order(
    sweep: tuple[list[Trajectory], list[int], int, Mode], data: st.DataObject, overshoot: bool
) -> None:
    trajs, rungs, keep, mode = sweep
    expected = synchronous(trajs, rungs, keep, mode)
    sim = Sweep(trajs, rungs, keep, mode)
    # Any interleaving: queued variants start late, paused ones come back, a held variant may
    # still report while its pause lands (overshoot).
    while movable := sim.movable(overshoot):
        sim.advance(data.draw(st.sampled_from(movable)))
        assert sim.out.items() <= expected.items()  # never rules out one the rung keeps
        assert sim.stopped.items() <= expected.items()
    assert not any(sim.active) and not sim.held  # nobody waits for ever
    assert sim.out == expected


@given(sweeps())
def test_each_permutation_of_starts_under_a_quota_of_two_gives_the_same_decisions(
    sweep: tuple[list[Trajectory], list[int], int, Mode],
) -> None:
    trajs, rungs, keep, mode = sweep
    expected = synchronous(trajs, rungs, keep, mode)
    for order in itertools.islice(itertools.permutations(range(len(trajs))), 60):
        sim = Sweep(trajs, rungs, keep, mode)
        queue = list(order)
        running: list[int] = []
        while True:
            # The quota lets two run at a time; a held or ended variant frees its place and a
            # promoted one goes back to the end of the queue.
            running = [i for i in running if sim.active[i] and i not in sim.held]
            queue += [i for i in range(len(trajs)) if sim.active[i] and i not in sim.held
                      and i not in running and i not in queue]  # fmt: skip
            queue = [i for i in queue if sim.active[i] and i not in sim.held]
            while len(running) < 2 and queue:
                running.append(queue.pop(0))
            if not running:
                break
            sim.advance(running[0])  # the first one in reports; the other lags
        assert sim.out == expected, order


def test_the_worst_pair_started_first_under_a_quota_of_two_is_stopped_at_the_first_rung() -> None:
    # Six variants, worst first, two at a time: the first pair waits at rung 10 (paused), the
    # others run, and the pair is stopped there once the rung is known, never run to the end.
    trajs = [Trajectory((float(6 - i), float(6 - i)), 2) for i in range(6)]
    sim = Sweep(trajs, [10, 20], 2, "min")
    sim.advance(0)
    sim.advance(1)
    assert sim.held == {0, 1} and not sim.stopped
    for i in (2, 3, 4, 5):
        sim.advance(i)
    assert sim.stopped == {"r0": 10, "r1": 10, "r2": 10}
    assert sim.held == set()  # r3..r5 are promoted: they go on to rung 20
    for i in (3, 4, 5):
        sim.advance(i)
    assert sim.stopped == {"r0": 10, "r1": 10, "r2": 10, "r3": 20, "r4": 20}  # keeps 3 // 2
