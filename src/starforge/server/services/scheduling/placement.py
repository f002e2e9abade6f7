"""Placement of one run: which GPUs of which nodes it gets, and why it does not fit. Pure
functions, no I/O, no database.

* :func:`free_gpus` subtracts the GPUs held by active attempts from the inventory.
* :func:`place` places every pool of one run or none (all-or-nothing). Within a pool every node
  rank gets a different node; each node gets the lowest free GPU indices. Nodes are chosen best-fit
  (the fewest free GPUs that still fit, then by name) so large holes stay open for large runs.
* :func:`shortfall` says, in words, why a run does not fit now; :func:`never_fits` why it could
  not fit even on an idle cluster (admission rejects it).

The queue as a whole (order, quotas, reservations) is
:mod:`starforge.server.services.scheduling.scheduler`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from starforge.contract.profiles import Pool
from starforge.server.settings import NodeDef


@dataclass(frozen=True)
class Slot:
    """One node of a placed run: its global rank in the attempt and what it got."""

    rank: int
    pool: str
    pool_rank: int
    node: str
    gpus: tuple[int, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "rank": self.rank,
            "pool": self.pool,
            "pool_rank": self.pool_rank,
            "node": self.node,
            "gpus": list(self.gpus),
        }


@dataclass(frozen=True)
class FreeNode:
    name: str
    series: str
    total: int
    free: tuple[int, ...]


def free_gpus(
    inventory: Sequence[NodeDef], held: Iterable[tuple[str, Iterable[int]]]
) -> dict[str, FreeNode]:
    """The inventory minus ``held`` (node name, GPU indices) pairs; unknown nodes are ignored."""
    taken: dict[str, set[int]] = {n.name: set() for n in inventory}
    for node, gpus in held:
        if node in taken:
            taken[node].update(gpus)
    return {
        n.name: FreeNode(
            n.name, n.series, n.gpus, tuple(i for i in range(n.gpus) if i not in taken[n.name])
        )
        for n in inventory
    }


def place(pools: Sequence[Pool], free: dict[str, FreeNode]) -> list[Slot] | None:
    """Slots for every node of every pool, or None when any pool does not fit."""
    remaining = {name: list(node.free) for name, node in free.items()}
    slots: list[Slot] = []
    for pool in pools:
        used_by_pool: set[str] = set()
        for pool_rank in range(pool.nodes):
            candidates = [
                n
                for n in free.values()
                if n.series == pool.series
                and n.name not in used_by_pool
                and len(remaining[n.name]) >= pool.gpus_per_node
            ]
            if not candidates:
                return None
            best = min(candidates, key=lambda n: (len(remaining[n.name]), n.name))
            gpus = tuple(sorted(remaining[best.name])[: pool.gpus_per_node])
            remaining[best.name] = [g for g in remaining[best.name] if g not in gpus]
            used_by_pool.add(best.name)
            slots.append(Slot(len(slots), pool.name, pool_rank, best.name, gpus))
    return slots


def slots_are_free(slots: Iterable[Slot], free: dict[str, FreeNode]) -> bool:
    """Whether every GPU of ``slots`` is still free in ``free`` (a placement re-checked)."""
    return all(s.node in free and set(s.gpus) <= set(free[s.node].free) for s in slots)


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def names(items: Sequence[str], most: int = 4) -> str:
    """``a``, ``a and b``, ``a, b and c``, ``a, b, c, d and 3 more``."""
    if len(items) > most:
        return f"{', '.join(items[:most])} and {len(items) - most} more"
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} and {items[-1]}"


def shortfall(pools: Sequence[Pool], free: dict[str, FreeNode]) -> str:
    """Why ``pools`` do not fit now, naming the free GPUs of each candidate node."""
    parts = []
    for pool in pools:
        if place([pool], free) is not None:
            continue
        nodes = sorted((n for n in free.values() if n.series == pool.series), key=lambda n: n.name)
        counts = [f"{len(n.free)} on {n.name}" for n in nodes]
        if counts:
            first = len(nodes[0].free)
            counts[0] = f"{first} {'is' if first == 1 else 'are'} free on {nodes[0].name}"
        parts.append(
            f"waiting for {plural(pool.nodes, 'node')} with {pool.gpus_per_node} free "
            f"{pool.series} GPUs: {', '.join(counts) or f'no {pool.series} node exists'}"
        )
    if not parts:  # each pool fits alone but not all together
        return "waiting for room for all pools of the run at once: " + ", ".join(
            f"{n.name} has {len(n.free)} free" for n in free.values()
        )
    return "; ".join(parts)


def never_fits(pools: Sequence[Pool], inventory: Sequence[NodeDef]) -> str | None:
    """Why the run could not fit even on an idle cluster, or None when it could."""
    for pool in pools:
        nodes = [n for n in inventory if n.series == pool.series]
        label = f"pool {pool.name!r} ({pool.profile})"
        if not nodes:
            series = ", ".join(sorted({n.series for n in inventory})) or "none"
            return (
                f"{label} needs {pool.series} GPUs but no node of this cluster has them "
                f"(GPU series here: {series})"
            )
        biggest = max(n.gpus for n in nodes)
        if pool.gpus_per_node > biggest:
            return (
                f"{label} needs {pool.gpus_per_node} GPUs per node but the largest "
                f"{pool.series} node has {biggest}"
            )
        big_enough = [n for n in nodes if n.gpus >= pool.gpus_per_node]
        if pool.nodes > len(big_enough):
            return (
                f"{label} needs {plural(pool.nodes, 'node')} with {pool.gpus_per_node} "
                f"{pool.series} GPUs each but the cluster has {len(big_enough)}"
            )
    if place(pools, free_gpus(inventory, [])) is None:
        total = {
            s: sum(n.gpus for n in inventory if n.series == s) for s in {p.series for p in pools}
        }
        need = ", ".join(
            f"{sum(p.total_gpus for p in pools if p.series == s)} {s} (the cluster has {t})"
            for s, t in sorted(total.items())
        )
        return f"all pools of the run together never fit this cluster: they need {need} GPUs"
    return None
