"""The queue: one scheduler pass over every queued run. Pure functions, no I/O, no database.

Placement of one run lives in :mod:`starforge.server.services.scheduling.placement` (re-exported
here, so callers say ``scheduler.place``). :func:`plan` is one pass: it decides start-now or
wait-because for every queued run, in the order it considers them:

* Order: higher priority first. Within a priority, fair share: the next run comes from the user
  who holds the fewest GPUs (counting what this pass started), a user's own runs oldest first, so
  one user's long queue never keeps another user's first run waiting. Fair share alone could keep
  a heavy user's run behind a light user's stream forever, so a run queued longer than
  ``patience_s`` goes ahead of fair share (oldest first) and reserves like any head. Plain
  priority-then-age order (:func:`order_queue`) is what a single user sees.
* Quota: a run that would take its user over a limit waits (it never fails) and reserves nothing.
* Gang: all pools of a run are placed at once or not at all.
* Reservation: a run that does not fit gets the nodes it will start on, chosen so that the fewest
  running runs must end first. Runs have no time limit, so backfill cannot be judged by "ends
  before the reserved start"; it is judged by "never touches what the reservation needs": a later
  run may use a reserved node only for GPUs the reservation leaves spare (free now + what its
  blockers release - what it needs). Every later run that does not fit reserves among the nodes
  still unreserved, so a wide run starves behind neither narrow runs nor another series' queue.
* Cost: during a pass free GPUs only shrink and reservations only grow, so a shape (series, nodes,
  GPUs per node of each pool) that failed to place once fails for the rest of the pass. With that
  cached, a pass over 10,000 queued runs costs little more than a loop over them. Explaining every
  waiting run (what views show) costs little more too: the numbers behind a capacity wait depend
  only on the shape and the free GPUs and reservations, which change a few times per pass (a start
  or a reservation), and the event that lifts a quota wait only on the user's usage; each is
  derived once per such state.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from starforge.contract.profiles import Pool
from starforge.server.services.scheduling import fairshare
from starforge.server.services.scheduling.fairshare import order_queue, queue_key
from starforge.server.services.scheduling.limits import UNLIMITED, Limits, beyond_quota, run_needs
from starforge.server.services.scheduling.placement import (
    FreeNode,
    Slot,
    free_gpus,
    names,
    never_fits,
    place,
    plural,
    shortfall,
    slots_are_free,
)
from starforge.server.settings import NodeDef

__all__ = [
    "UNLIMITED",
    "Blocker",
    "Decision",
    "FreeNode",
    "Holding",
    "Limits",
    "QueuePass",
    "QueuedRun",
    "Slot",
    "beyond_quota",
    "free_gpus",
    "never_fits",
    "order_queue",
    "place",
    "plan",
    "queue_key",
    "run_needs",
    "shortfall",
    "slots_are_free",
]


# ---- the pass ---------------------------------------------------------------------------------


class Blocker(StrEnum):
    STARTING = "starting"  # it fits now: this pass starts it
    QUOTA = "quota"  # its user's quota is in use by the user's other runs
    CAPACITY = "capacity"  # not enough free GPUs on nodes of its series
    RESERVED = "reserved"  # the GPUs exist, but they are kept for a run ahead of it
    NEVER = "never_fits"  # the cluster (as configured now) can never hold it
    HELD = "held"  # nothing of its own: a maintenance drain or its daily GPU-hours hold it


@dataclass(slots=True)
class QueuedRun:
    """A queued run as the pass sees it; ``shape`` and ``need`` are derived once."""

    id: str
    user: str
    priority: int
    created_at: datetime
    pools: tuple[Pool, ...]
    shape: tuple[tuple[str, int, int], ...] = ()
    profiles: frozenset[str] = frozenset()
    need: dict[str, int] = field(default_factory=dict)
    gpus: int = 0
    key: tuple[int, datetime, str] = field(init=False)  # :func:`queue_key`, derived once

    def __post_init__(self) -> None:
        self.shape = tuple((p.series, p.nodes, p.gpus_per_node) for p in self.pools)
        self.profiles = frozenset(p.profile for p in self.pools)
        self.need = run_needs(self.pools)
        self.gpus = sum(self.need.values())
        self.key = queue_key(self.priority, self.created_at, self.id)

    def like(self, run_id: str, user: str, priority: int, created_at: datetime) -> QueuedRun:
        """Another run of the same pools, sharing the derived fields (a snapshot of 10,000
        runs has a handful of shapes: each is derived once)."""
        twin = object.__new__(QueuedRun)
        twin.id, twin.user, twin.priority, twin.created_at = run_id, user, priority, created_at
        twin.pools, twin.shape, twin.profiles = self.pools, self.shape, self.profiles
        twin.need, twin.gpus = self.need, self.gpus
        twin.key = queue_key(priority, created_at, run_id)
        return twin


@dataclass(frozen=True)
class Holding:
    """GPUs an active run holds on one node."""

    run_id: str
    user: str
    node: str
    gpus: tuple[int, ...]


@dataclass(slots=True)
class Decision:
    run_id: str
    user: str
    position: int  # 1-based, in the order the pass considered the queue
    blocker: Blocker
    reason: str = ""
    slots: list[Slot] | None = None  # the placement, when it starts
    detail: str = ""
    blocking_runs: tuple[str, ...] = ()
    next_event: str = ""
    reserved_nodes: tuple[str, ...] = ()

    @property
    def starts(self) -> bool:
        return self.slots is not None


@dataclass(slots=True)
class _Use:
    """What one user holds: GPUs by series and by run (in the order the runs were seen)."""

    gpus: int = 0
    by_series: dict[str, int] = field(default_factory=dict)
    by_run: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, run_id: str, series: str, n: int) -> None:
        self.gpus += n
        self.by_series[series] = self.by_series.get(series, 0) + n
        per = self.by_run.setdefault(run_id, {})
        per[series] = per.get(series, 0) + n

    def runs_on(self, series: str | None) -> list[str]:
        return [r for r, per in self.by_run.items() if series is None or series in per]


def _release_order(held: Mapping[str, int]) -> list[tuple[str, int]]:
    """Runs whose end frees the most first: the fewest runs that must end come first."""
    return sorted(held.items(), key=lambda kv: (-kv[1], kv[0]))


def _until(runs: Sequence[str]) -> str:
    if len(runs) == 1:
        return f"when {runs[0]} ends"
    return f"when {names(list(runs))} have ended"


Shape = tuple[tuple[str, int, int], ...]
_Event = tuple[str, tuple[str, ...]]  # what lets a run start, and the runs that must end


class _Pass:
    """The mutable state of one pass: free GPUs, holders, usage, reservations, caches."""

    def __init__(
        self,
        inventory: Sequence[NodeDef],
        holdings: Iterable[Holding],
        limits: Mapping[str, Limits],
        default: Limits,
    ) -> None:
        self.inventory = list(inventory)
        self.series = {n.name: n.series for n in inventory}
        self.total = {n.name: n.gpus for n in inventory}
        holdings = list(holdings)
        start = free_gpus(inventory, ((h.node, h.gpus) for h in holdings))
        self.free: dict[str, list[int]] = {name: list(n.free) for name, n in start.items()}
        self.held: dict[str, dict[str, int]] = {n.name: {} for n in inventory}
        self.use: dict[str, _Use] = {}
        for h in holdings:
            if h.node in self.held:  # a node gone from the inventory holds nothing here
                self.held[h.node][h.run_id] = self.held[h.node].get(h.run_id, 0) + len(h.gpus)
                self._use(h.user).add(h.run_id, self.series[h.node], len(h.gpus))
        self.limits, self.default = limits, default
        self.kept_for: dict[str, str] = {}  # reserved node -> the run it is kept for
        self.spare: dict[str, int] = {}  # reserved node -> GPUs backfill may still take
        self.failed: dict[Shape, tuple[Blocker, str]] = {}
        self.open: set[Shape] = set()  # shapes of the queue that may still start in this pass
        self.unreservable: set[Shape] = set()
        self.never: dict[Shape, str | None] = {}  # why a shape can never be placed, or None
        self.quota_cache: dict[str, dict[tuple[Shape, frozenset[str]], str | None]] = {}
        self.event_cache: dict[str, dict[tuple[Shape, frozenset[str]], _Event]] = {}
        self.version = 0  # moves whenever free GPUs or reservations change
        self.detail_cache: dict[tuple[Shape, int], _Event] = {}
        self.free_users = {u for u, lim in limits.items() if lim.unlimited}
        self.default_free = default.unlimited
        self.nobody_limited = self.default_free and len(self.free_users) == len(limits)
        self._avail: dict[str, FreeNode] | None = None
        self._real: dict[str, FreeNode] | None = None

    def _use(self, user: str) -> _Use:
        use = self.use.get(user)
        if use is None:
            use = self.use[user] = _Use()
        return use

    # ---- views of the free GPUs ---------------------------------------------------------------

    def avail(self) -> dict[str, FreeNode]:
        """Free GPUs as a run behind the reservations may use them."""
        if self._avail is None:
            self._avail = {
                name: FreeNode(
                    name,
                    self.series[name],
                    self.total[name],
                    tuple(free[: self.spare[name]] if name in self.spare else free),
                )
                for name, free in self.free.items()
            }
        return self._avail

    def real(self) -> dict[str, FreeNode]:
        """Free GPUs ignoring reservations."""
        if self._real is None:
            self._real = {
                name: FreeNode(name, self.series[name], self.total[name], tuple(free))
                for name, free in self.free.items()
            }
        return self._real

    def take(self, run: QueuedRun, slots: list[Slot]) -> None:
        use = self._use(run.user)
        for s in slots:
            gpus = set(s.gpus)
            self.free[s.node] = [g for g in self.free[s.node] if g not in gpus]
            if s.node in self.spare:
                self.spare[s.node] -= len(gpus)
            self.held[s.node][run.id] = self.held[s.node].get(run.id, 0) + len(gpus)
            use.add(run.id, self.series[s.node], len(gpus))
        self.quota_cache.pop(run.user, None)
        self.event_cache.pop(run.user, None)
        self.version += 1
        self._avail = self._real = None

    # ---- quota ----------------------------------------------------------------------------------

    def quota(self, run: QueuedRun) -> str | None:
        """Why the user's quota keeps ``run`` waiting now, or None."""
        if self.nobody_limited or run.user in self.free_users:
            return None
        if self.default_free and run.user not in self.limits:
            return None
        key = (run.shape, run.profiles)
        cache = self.quota_cache.setdefault(run.user, {})
        if key not in cache:
            cache[key] = self._quota(run)
        return cache[key]

    def _quota(self, run: QueuedRun) -> str | None:
        lim = self.limits.get(run.user, self.default)
        use = self.use.get(run.user) or _Use()
        never = beyond_quota(run.pools, lim)
        if never is not None:
            return never
        if lim.max_runs is not None and len(use.by_run) >= lim.max_runs:
            runs = use.runs_on(None)
            return f"your quota: {len(runs)} of {lim.max_runs} runs at once in use ({names(runs)})"
        if lim.max_gpus is not None and use.gpus + run.gpus > lim.max_gpus:
            return (
                f"your quota: {use.gpus} of {lim.max_gpus} GPUs in use by runs "
                f"{names(use.runs_on(None))}; this run needs {run.gpus}"
            )
        for series, n in sorted(run.need.items()):
            cap = lim.max_gpus_per_series.get(series)
            used = use.by_series.get(series, 0)
            if cap is not None and used + n > cap:
                return (
                    f"your quota: {used} of {cap} {series} GPUs in use by runs "
                    f"{names(use.runs_on(series))}; this run needs {n}"
                )
        return None

    def quota_event(self, run: QueuedRun) -> tuple[str, tuple[str, ...]]:
        """The earliest event that lifts the quota block: which of the user's runs must end."""
        cache = self.event_cache.setdefault(run.user, {})
        key = (run.shape, run.profiles)
        if key not in cache:
            cache[key] = self._quota_event(run)
        return cache[key]

    def _quota_event(self, run: QueuedRun) -> tuple[str, tuple[str, ...]]:
        lim = self.limits.get(run.user, self.default)
        use = self.use.get(run.user) or _Use()
        if beyond_quota(run.pools, lim) is not None:
            return "when an admin raises your quota", ()
        if lim.max_runs is not None and len(use.by_run) >= lim.max_runs:
            runs = use.runs_on(None)
            return f"when one of your runs ends ({names(runs)})", tuple(runs)
        for series, need, cap in self._tight(run, lim, use):
            held = {
                r: (sum(per.values()) if series is None else per.get(series, 0))
                for r, per in use.by_run.items()
            }
            excess = (use.gpus if series is None else use.by_series.get(series, 0)) + need - cap
            ending: list[str] = []
            for r, n in _release_order(held):
                if excess <= 0:
                    break
                ending.append(r)
                excess -= n
            return _until(ending), tuple(ending)
        return "", ()

    @staticmethod
    def _tight(run: QueuedRun, lim: Limits, use: _Use) -> list[tuple[str | None, int, int]]:
        tight: list[tuple[str | None, int, int]] = []
        if lim.max_gpus is not None and use.gpus + run.gpus > lim.max_gpus:
            tight.append((None, run.gpus, lim.max_gpus))
        for series, n in sorted(run.need.items()):
            cap = lim.max_gpus_per_series.get(series)
            if cap is not None and use.by_series.get(series, 0) + n > cap:
                tight.append((series, n, cap))
        return tight

    # ---- capacity and reservations --------------------------------------------------------------

    def classify(self, run: QueuedRun) -> tuple[Blocker, str]:
        """Why ``run`` (which did not fit behind the reservations) does not start."""
        if self.spare and place(run.pools, self.real()) is not None:
            series = {p.series for p in run.pools}
            kept = sorted(n for n in self.kept_for if self.series[n] in series)
            owners = sorted({self.kept_for[n] for n in kept})
            verb = "is" if len(kept) == 1 else "are"
            whom = "it" if len(owners) == 1 else "them"
            return Blocker.RESERVED, (
                f"waiting behind {names(owners)}, ahead in the queue: "
                f"{names(kept)} {verb} kept for {whom}"
            )
        return Blocker.CAPACITY, shortfall(run.pools, self.real())

    def _to_free(self, node: str, need: int, ending: Collection[str]) -> list[str] | None:
        """The fewest more runs that must end for ``need`` GPUs on ``node`` (None: never)."""
        held = self.held[node]
        avail = len(self.free[node]) + sum(n for r, n in held.items() if r in ending)
        extra: list[str] = []
        for r, n in _release_order({r: n for r, n in held.items() if r not in ending}):
            if avail >= need:
                break
            extra.append(r)
            avail += n
        return extra if avail >= need else None

    def reserve(self, run: QueuedRun) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
        """Keep, for ``run``, the unreserved nodes that need the fewest runs to end."""
        taken: dict[str, int] = {}
        ending: dict[str, None] = {}  # an ordered set
        for pool in run.pools:
            used_by_pool: set[str] = set()
            for _ in range(pool.nodes):
                best: tuple[tuple[int, int, str], list[str]] | None = None
                for name, series in self.series.items():
                    if series != pool.series or name in used_by_pool or name in self.kept_for:
                        continue
                    extra = self._to_free(name, taken.get(name, 0) + pool.gpus_per_node, ending)
                    if extra is None:
                        continue
                    key = (len(extra), -len(self.free[name]), name)
                    if best is None or key < best[0]:
                        best = (key, extra)
                if best is None:
                    return None
                name = best[0][2]
                ending.update(dict.fromkeys(best[1]))
                taken[name] = taken.get(name, 0) + pool.gpus_per_node
                used_by_pool.add(name)
        if not ending:  # nothing to wait for: the run is blocked by something else
            return None
        for name, n in taken.items():
            released = sum(c for r, c in self.held[name].items() if r in ending)
            self.kept_for[name] = run.id
            self.spare[name] = len(self.free[name]) + released - n
        self.version += 1
        self._avail = None
        return tuple(sorted(taken)), tuple(ending)

    def capacity_detail(self, run: QueuedRun) -> tuple[str, tuple[str, ...]]:
        """Free GPUs per candidate node and who holds the rest, for each pool that waits (decided
        before ``run`` reserves anything, so it does not depend on which run of the shape asks)."""
        key = (run.shape, self.version)
        if key not in self.detail_cache:
            self.detail_cache[key] = self._capacity_detail(run)
        return self.detail_cache[key]

    def _capacity_detail(self, run: QueuedRun) -> tuple[str, tuple[str, ...]]:
        avail = self.avail()
        parts: list[str] = []
        blockers: dict[str, None] = {}
        for pool in run.pools:
            nodes = sorted(
                n
                for n, s in self.series.items()
                if s == pool.series and self.total[n] >= pool.gpus_per_node
            )
            ready = [n for n in nodes if len(avail[n].free) >= pool.gpus_per_node]
            if len(ready) >= pool.nodes:
                continue
            have = (
                f"{len(ready)} {'has' if len(ready) == 1 else 'have'} them ({names(ready)})"
                if ready
                else "none has them now"
            )
            busy = []
            for n in (n for n in nodes if n not in ready):
                runs = [r for r, _ in _release_order(self.held[n])]
                blockers.update(dict.fromkeys(runs))
                free = len(self.free[n])
                text = f"{n} has {free} free"
                if runs:
                    until = "it ends" if len(runs) == 1 else "they end"
                    text += f", {self.total[n] - free} used by {names(runs)} until {until}"
                if self.kept_for.get(n, run.id) != run.id:
                    text += f", kept for {self.kept_for[n]}"
                busy.append(text)
            parts.append(
                f"needs {plural(pool.nodes, 'node')} with {pool.gpus_per_node} free "
                f"{pool.series} GPUs; {have}; " + "; ".join(busy)
            )
        text = " | ".join(parts) or "each pool fits alone, but not all pools at once"
        return text, tuple(blockers)

    # ---- one run --------------------------------------------------------------------------------

    def gpus_held(self, user: str) -> int:
        """The GPUs ``user`` holds, counting what this pass started (fair share's measure)."""
        use = self.use.get(user)
        return use.gpus if use is not None else 0

    def settled(self) -> bool:
        """Whether no run left can start in this pass (each shape of the queue has failed or
        can never fit), so the GPUs each user holds stay as they are."""
        return not self.open

    def decide(self, run: QueuedRun, position: int, explain: bool) -> Decision:
        shape = run.shape
        why = None if self.nobody_limited else self.quota(run)
        if why is not None:
            d = Decision(run.id, run.user, position, Blocker.QUOTA, why)
            if explain:
                d.next_event, d.blocking_runs = self.quota_event(run)
                d.detail = why
            return d
        never = self.never.get(shape, "")
        if never == "":  # not yet asked for this shape
            why = never_fits(run.pools, self.inventory)
            never = self.never[shape] = None if why is None else f"can never be placed here: {why}"
        if never is not None:
            self.open.discard(shape)
            return Decision(run.id, run.user, position, Blocker.NEVER, never)
        cached = self.failed.get(shape)
        if cached is None:
            slots = place(run.pools, self.avail())
            if slots is not None:
                self.take(run, slots)
                where = ", ".join(f"{s.node}[{','.join(map(str, s.gpus))}]" for s in slots)
                return Decision(
                    run.id, run.user, position, Blocker.STARTING, f"fits now on {where}", slots
                )
            cached = self.failed[run.shape] = self.classify(run)
            self.open.discard(run.shape)
        d = Decision(run.id, run.user, position, cached[0], cached[1])
        if explain:
            detail = self.detail_cache.get((shape, self.version))
            d.detail, d.blocking_runs = detail or self.capacity_detail(run)
        if shape not in self.unreservable:
            kept = self.reserve(run)
            if kept is None:
                self.unreservable.add(run.shape)
            else:
                d.reserved_nodes, ending = kept
                d.next_event, d.blocking_runs = _until(ending), ending
        return d


def plan(
    queue: Iterable[QueuedRun],
    inventory: Sequence[NodeDef],
    holdings: Iterable[Holding],
    limits: Mapping[str, Limits] | None = None,
    *,
    default: Limits = UNLIMITED,
    explain: Collection[str] = (),
    explain_all: bool = False,
    overdue_before: datetime | None = None,
) -> list[Decision]:
    """One pass over the queue: a decision per queued run, in the order they were considered.

    Runs that start get their slots (to be committed in that order). Waiting runs get a one-line
    reason; the first waiting run (the head) and the runs named in ``explain`` also get the
    numbers behind it (``detail``) and the runs they wait for (with ``explain_all``, every
    waiting run does). Runs queued before
    ``overdue_before`` (now minus the patience) go ahead of fair share within their priority.
    """
    state = _Pass(inventory, holdings, limits or {}, default)
    queue = list(queue)
    state.open = {run.shape for run in queue}
    wanted = set(explain)
    decisions: list[Decision] = []
    head_found = False
    for run in fairshare.fair_order(queue, state.gpus_held, overdue_before, state.settled):
        explained = explain_all or not head_found or run.id in wanted
        d = state.decide(run, len(decisions) + 1, explained)
        if d.slots is None and not head_found:
            head_found = True
            if not d.next_event and d.blocker in (Blocker.CAPACITY, Blocker.RESERVED):
                d.next_event = "when runs ahead of it have started and enough GPUs are free"
        decisions.append(d)
    return decisions


@dataclass(frozen=True)
class QueuePass:
    """A pass's decisions as views see them once its starts are committed: the runs it starts
    have left the queue, so each waiting run's place counts only the waiting runs before it."""

    decisions: dict[str, Decision]
    places: dict[str, int]  # each run's place in the queue the pass left
    queued: int  # how many runs the pass left waiting
    wakeups: int  # the runtime's wake-up count when the pass read the queue
    at: float  # time.monotonic() of the pass
    urgent: int = 0  # the runtime's urgent wake-up count when the pass read the queue

    @classmethod
    def after(
        cls, decisions: Sequence[Decision], wakeups: int, at: float, urgent: int = 0
    ) -> QueuePass:
        places: dict[str, int] = {}
        waiting = 0
        for d in decisions:
            places[d.run_id] = waiting + 1
            waiting += 0 if d.starts else 1
        return cls({d.run_id: d for d in decisions}, places, waiting, wakeups, at, urgent)
