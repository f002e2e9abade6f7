"""Placement: all-or-nothing, best fit, lowest GPU indices, queue order, reasons in words."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from starforge.contract.profiles import Pool
from starforge.server.services.scheduler import (
    free_gpus,
    never_fits,
    order_queue,
    place,
    shortfall,
)

from .factories import INVENTORY


def pool(gpus: int, nodes: int = 1, series: str = "h200", name: str = "all") -> Pool:
    return Pool(
        name=name, profile=series, series=series, nodes=nodes, gpus_per_node=gpus, roles=["trainer"]
    )


def test_a_run_gets_the_lowest_free_gpu_indices_of_a_node() -> None:
    free = free_gpus(INVENTORY, [("h200-1", [0, 1])])
    slots = place([pool(4)], free)
    assert slots is not None
    assert [(s.node, s.gpus) for s in slots] == [("h200-1", (2, 3, 4, 5))]


def test_best_fit_prefers_the_fullest_node_that_still_fits() -> None:
    free = free_gpus(INVENTORY, [("h200-2", range(6))])
    slots = place([pool(2)], free)
    assert slots is not None and slots[0].node == "h200-2" and slots[0].gpus == (6, 7)


def test_the_nodes_of_a_pool_are_distinct_and_ranked_in_order() -> None:
    slots = place([pool(8, nodes=2)], free_gpus(INVENTORY, []))
    assert slots is not None
    assert [(s.rank, s.pool_rank, s.node) for s in slots] == [(0, 0, "h200-1"), (1, 1, "h200-2")]


def test_all_pools_are_placed_or_none() -> None:
    free = free_gpus(INVENTORY, [("h100-1", range(7))])
    pools = [pool(8, name="train"), pool(2, series="h100", name="rollout")]
    assert place(pools, free) is None
    # Nothing was consumed by the pool that would have fitted on its own.
    assert place([pool(8, nodes=2)], free) is not None


def test_two_pools_of_one_run_may_share_a_node_without_sharing_gpus() -> None:
    inventory = INVENTORY[:1]
    slots = place([pool(4, name="a"), pool(4, name="b")], free_gpus(inventory, []))
    assert slots is not None
    assert [(s.rank, s.pool, s.gpus) for s in slots] == [
        (0, "a", (0, 1, 2, 3)),
        (1, "b", (4, 5, 6, 7)),
    ]


def test_held_gpus_on_unknown_nodes_are_ignored() -> None:
    free = free_gpus(INVENTORY, [("gone-node", [0, 1])])
    assert all(len(n.free) == 8 for n in free.values())


def test_the_queue_is_ordered_by_priority_then_age() -> None:
    t0 = datetime(2025, 1, 1, tzinfo=UTC)
    runs = [
        SimpleNamespace(id="r-c", priority=0, created_at=t0),
        SimpleNamespace(id="r-a", priority=0, created_at=t0 - timedelta(seconds=1)),
        SimpleNamespace(id="r-b", priority=5, created_at=t0 + timedelta(seconds=9)),
    ]
    assert [r.id for r in order_queue(runs)] == ["r-b", "r-a", "r-c"]


def test_the_shortfall_names_the_free_gpus_of_each_node() -> None:
    free = free_gpus(INVENTORY, [("h200-1", range(4)), ("h200-2", range(8))])
    assert shortfall([pool(8)], free) == (
        "waiting for 1 node with 8 free h200 GPUs: 4 are free on h200-1, 0 on h200-2"
    )


def test_a_pool_bigger_than_any_node_never_fits() -> None:
    assert never_fits([pool(16)], INVENTORY) == (
        "pool 'all' (h200) needs 16 GPUs per node but the largest h200 node has 8"
    )


def test_more_nodes_than_the_cluster_has_never_fit() -> None:
    assert never_fits([pool(8, nodes=3)], INVENTORY) == (
        "pool 'all' (h200) needs 3 nodes with 8 h200 GPUs each but the cluster has 2"
    )


def test_an_unknown_series_never_fits() -> None:
    why = never_fits([pool(1, series="a100")], INVENTORY)
    assert why is not None and "no node of this cluster has them" in why and "h100, h200" in why


def test_pools_that_fit_alone_but_not_together_never_fit() -> None:
    why = never_fits([pool(8, nodes=2, name="a"), pool(8, name="b")], INVENTORY)
    assert why is not None and "24 h200 (the cluster has 16)" in why


def test_what_fits_an_idle_cluster_is_admissible() -> None:
    assert never_fits([pool(8, nodes=2), pool(8, series="h100", name="r")], INVENTORY) is None
