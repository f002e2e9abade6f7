"""Placement and the scheduler pass: all-or-nothing, best fit, queue order (priority, fair share,
patience), reservations and backfill, quotas, and why a run waits, in numbers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from starforge.contract.profiles import Pool
from starforge.server.services.scheduling.scheduler import (
    Blocker,
    Decision,
    Holding,
    Limits,
    QueuedRun,
    free_gpus,
    never_fits,
    order_queue,
    place,
    plan,
    shortfall,
)
from starforge.server.settings import NodeDef

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


# ---- the pass: order, gang, reservations, backfill, quotas, why pending ---------------------

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def queued(
    run_id: str, *pools: Pool, user: str = "alice", priority: int = 0, at: int = 0
) -> QueuedRun:
    return QueuedRun(run_id, user, priority, T0 + timedelta(seconds=at), tuple(pools))


def holding(run_id: str, node: str, gpus: int, *, user: str = "carol", first: int = 0) -> Holding:
    return Holding(run_id, user, node, tuple(range(first, first + gpus)))


def started(decisions: list[Decision]) -> list[str]:
    return [d.run_id for d in decisions if d.starts]


def by_id(decisions: list[Decision]) -> dict[str, Decision]:
    return {d.run_id: d for d in decisions}


def test_a_pass_decides_every_queued_run_and_numbers_them_in_the_order_it_considered_them() -> None:
    queue = [
        queued("r-b", pool(8), at=2),
        queued("r-a", pool(8), at=1),
        queued("r-c", pool(8), at=3),
    ]
    decisions = plan(queue, INVENTORY, [])
    assert [(d.run_id, d.position) for d in decisions] == [("r-a", 1), ("r-b", 2), ("r-c", 3)]
    assert started(decisions) == ["r-a", "r-b"]
    assert by_id(decisions)["r-c"].blocker is Blocker.CAPACITY


def test_a_higher_priority_run_goes_before_an_older_one() -> None:
    queue = [
        queued("r-old", pool(8, nodes=2), at=0),
        queued("r-vip", pool(8, nodes=2), priority=5, at=9),
    ]
    assert started(plan(queue, INVENTORY, [])) == ["r-vip"]


def test_a_gang_that_does_not_fit_whole_takes_nothing_but_its_reservation() -> None:
    held = [holding("r-x", "h100-1", 7)]
    queue = [
        queued("r-gang", pool(8, name="train"), pool(2, series="h100", name="rollout"), at=0),
        queued("r-next", pool(8), at=1),
        queued("r-more", pool(8), at=2),
    ]
    decisions = by_id(plan(queue, INVENTORY, held))
    gang = decisions["r-gang"]
    assert gang.slots is None and gang.reserved_nodes == ("h100-1", "h200-1")
    assert gang.next_event == "when r-x ends"
    assert decisions["r-next"].starts  # h200-2 was never half-taken by the gang
    assert decisions["r-more"].blocker is Blocker.RESERVED  # h200-1 waits for the gang


def test_fair_share_starts_the_first_run_of_a_user_who_holds_nothing_before_a_busy_users_next() -> (
    None
):
    queue = [queued(f"r-a{i}", pool(8), user="alice", at=i) for i in range(3)]
    queue.append(queued("r-b0", pool(8), user="bob", at=10))
    assert started(plan(queue, INVENTORY, [])) == ["r-a0", "r-b0"]


def test_fair_share_prefers_the_user_holding_fewer_gpus_over_an_older_run() -> None:
    held = [holding("r-run", "h200-1", 8, user="alice")]
    queue = [
        queued("r-alice", pool(8), user="alice", at=0),
        queued("r-bob", pool(8), user="bob", at=5),
    ]
    decisions = by_id(plan(queue, INVENTORY, held))
    assert decisions["r-bob"].starts and decisions["r-bob"].position == 1
    assert not decisions["r-alice"].starts


def test_a_run_queued_longer_than_the_patience_goes_ahead_of_fair_share() -> None:
    held = [holding("r-run", "h200-1", 8, user="alice")]
    queue = [
        queued("r-alice", pool(8), user="alice", at=0),
        queued("r-bob", pool(8), user="bob", at=5),
    ]
    decisions = by_id(plan(queue, INVENTORY, held, overdue_before=T0 + timedelta(seconds=1)))
    assert decisions["r-alice"].starts and not decisions["r-bob"].starts


def test_a_wide_run_at_the_head_never_starves_behind_a_stream_of_narrow_ones() -> None:
    """Runners end one at a time while narrow runs keep arriving: the wide one starts as soon as
    the GPUs it waited for are free, and no narrow run ever lands on what it needs."""
    running = {f"r-n{i}": ("h200-1" if i < 2 else "h200-2", 4 * (i % 2)) for i in range(4)}
    queue = [queued("r-wide", pool(8, nodes=2), at=0)]
    arrivals = iter(range(100, 200))
    for _ in range(6):
        queue += [queued(f"r-s{next(arrivals)}", pool(4), user="bob", at=50) for _ in range(3)]
        held = [holding(r, node, 4, first=first) for r, (node, first) in running.items()]
        decisions = plan(queue, INVENTORY, held)
        if "r-wide" in started(decisions):
            break
        assert started(decisions) == [], "a narrow run took GPUs the wide run waits for"
        assert by_id(decisions)["r-wide"].reserved_nodes == ("h200-1", "h200-2")
        running.pop(sorted(running)[0])  # the oldest runner ends
    else:
        raise AssertionError("the wide run never started")
    assert not running  # it started exactly when everything it waited for had ended


def test_backfill_takes_another_series_and_the_gpus_a_reservation_leaves_spare() -> None:
    held = [holding("r-a", "h200-1", 8), holding("r-b", "h200-2", 4)]
    queue = [
        queued("r-wide", pool(8, nodes=2), at=0),
        queued("r-h100", pool(8, series="h100"), at=1),
        queued("r-two", pool(2), at=2),
    ]
    decisions = by_id(plan(queue, INVENTORY, held))
    assert decisions["r-wide"].reserved_nodes == ("h200-1", "h200-2")
    assert decisions["r-h100"].starts
    # h200-2 has 4 free; once r-a and r-b end the wide run needs 8 there and 8 would be free:
    # nothing is spare, so a 2-GPU run may not take them.
    assert decisions["r-two"].blocker is Blocker.RESERVED
    assert "waiting behind r-wide" in decisions["r-two"].reason


def test_a_narrow_run_may_use_gpus_the_reserved_start_does_not_need() -> None:
    held = [holding("r-a", "h200-1", 6), holding("r-b", "h200-2", 8)]
    queue = [queued("r-head", pool(8), at=0), queued("r-small", pool(2), at=1)]
    decisions = by_id(plan(queue, INVENTORY, held))
    head, small = decisions["r-head"], decisions["r-small"]
    assert head.reserved_nodes == ("h200-1",) and head.next_event == "when r-a ends"
    assert small.starts is False  # r-a's end frees 6 + 2 free = 8: all of it is needed
    held = [holding("r-a", "h200-1", 4), holding("r-b", "h200-2", 8)]
    queue = [queued("r-head", pool(6), at=0), queued("r-small", pool(2), at=1)]
    decisions = by_id(plan(queue, INVENTORY, held))
    # 4 free now + 4 released by r-a = 8, the head needs 6: 2 are spare for backfill.
    assert decisions["r-small"].starts and decisions["r-small"].slots[0].node == "h200-1"  # type: ignore[index]


def test_the_head_is_told_the_numbers_and_the_earliest_event_that_lets_it_start() -> None:
    held = [holding("r-7f3a", "h200-1", 8)]
    queue = [queued("r-wide", pool(8, nodes=2), at=0)]
    [head] = plan(queue, INVENTORY, held)
    assert head.reason == (
        "waiting for 2 nodes with 8 free h200 GPUs: 0 are free on h200-1, 8 on h200-2"
    )
    assert head.detail == (
        "needs 2 nodes with 8 free h200 GPUs; 1 has them (h200-2); "
        "h200-1 has 0 free, 8 used by r-7f3a until it ends"
    )
    assert head.next_event == "when r-7f3a ends" and head.blocking_runs == ("r-7f3a",)


def test_a_run_over_its_quota_waits_with_the_numbers_and_reserves_nothing() -> None:
    held = [holding("r-mine", "h200-1", 8, user="alice")]
    queue = [
        queued("r-more", pool(8), user="alice", at=0),
        queued("r-bob", pool(8), user="bob", at=1),
    ]
    limits = {"alice": Limits(max_gpus_per_series={"h200": 8})}
    decisions = by_id(plan(queue, INVENTORY, held, limits, explain=["r-more"]))
    more = decisions["r-more"]
    assert more.blocker is Blocker.QUOTA
    assert more.reason == "your quota: 8 of 8 h200 GPUs in use by runs r-mine; this run needs 8"
    assert more.next_event == "when r-mine ends" and more.reserved_nodes == ()
    assert decisions["r-bob"].starts  # the free node was not kept for a run its quota blocks


def test_quota_limits_on_runs_and_profiles_keep_runs_waiting_with_reasons() -> None:
    held = [holding("r-1", "h200-1", 1, user="alice")]
    queue = [
        queued("r-2", pool(1), user="alice"),
        queued("r-3", pool(1, series="h100"), user="bob"),
    ]
    limits = {
        "alice": Limits(max_runs=1),
        "bob": Limits(allowed_profiles=frozenset({"h200"})),
    }
    decisions = by_id(plan(queue, INVENTORY, held, limits))
    assert decisions["r-2"].reason == "your quota: 1 of 1 runs at once in use (r-1)"
    assert decisions["r-3"].reason == "your quota does not allow profile h100 (allowed: h200)"


def test_the_default_limits_apply_to_users_without_their_own() -> None:
    queue = [queued("r-a", pool(8, nodes=2), user="alice"), queued("r-b", pool(8), user="bob")]
    decisions = by_id(plan(queue, INVENTORY, [], {"bob": Limits()}, default=Limits(max_gpus=8)))
    assert decisions["r-a"].blocker is Blocker.QUOTA and decisions["r-b"].starts


def test_a_queued_run_the_cluster_can_no_longer_hold_waits_without_reserving() -> None:
    queue = [queued("r-big", pool(8, nodes=3), at=0), queued("r-ok", pool(8), at=1)]
    decisions = by_id(plan(queue, INVENTORY, []))
    assert (
        decisions["r-big"].blocker is Blocker.NEVER and "cluster has 2" in decisions["r-big"].reason
    )
    assert decisions["r-ok"].starts


# ---- properties -------------------------------------------------------------------------------

SHAPES = [pool(1), pool(2), pool(4), pool(8), pool(8, nodes=2), pool(3, series="h100")]


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[NodeDef], list[Holding], list[QueuedRun], dict]:
    inventory = [
        NodeDef(name=f"h200-{i}", series="h200", gpus=8) for i in range(draw(st.integers(1, 4)))
    ] + [NodeDef(name=f"h100-{i}", series="h100", gpus=4) for i in range(draw(st.integers(0, 2)))]
    held: list[Holding] = []
    for i, node in enumerate(inventory):
        n = draw(st.integers(0, node.gpus))
        if n:
            held.append(
                Holding(f"r-held{i}", draw(st.sampled_from("ab")), node.name, tuple(range(n)))
            )
    queue = [
        queued(
            f"r-q{i}",
            *draw(st.lists(st.sampled_from(SHAPES), min_size=1, max_size=2)),
            user=draw(st.sampled_from("abc")),
            priority=draw(st.integers(0, 1)),
            at=draw(st.integers(0, 5)),
        )
        for i in range(draw(st.integers(0, 12)))
    ]
    queue = [
        QueuedRun(
            r.id,
            r.user,
            r.priority,
            r.created_at,
            tuple(p.model_copy(update={"name": f"p{j}"}) for j, p in enumerate(r.pools)),
        )
        for r in queue
    ]
    limits = {
        "a": Limits(max_gpus=draw(st.integers(0, 24))),
        "b": Limits(max_runs=draw(st.integers(0, 3))),
    }
    return inventory, held, queue, limits


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_a_pass_never_gives_a_gpu_twice_never_half_places_and_never_breaks_a_quota(
    scenario: tuple[list[NodeDef], list[Holding], list[QueuedRun], dict],
) -> None:
    inventory, held, queue, limits = scenario
    decisions = plan(queue, inventory, held, limits)
    assert sorted(d.position for d in decisions) == list(range(1, len(queue) + 1))
    taken = {(h.node, g) for h in held for g in h.gpus}
    size = {n.name: n.gpus for n in inventory}
    runs = {r.id: r for r in queue}
    use: dict[str, list[int]] = {}  # user -> [gpus, runs]
    for h in held:
        use.setdefault(h.user, [0, 0])[0] += len(h.gpus)
    for user in {h.user for h in held}:
        use[user][1] += len({h.run_id for h in held if h.user == user})
    for d in decisions:
        if not d.starts:
            continue
        run = runs[d.run_id]
        assert d.slots is not None
        assert len(d.slots) == sum(p.nodes for p in run.pools)  # all pools or none
        for p in run.pools:
            mine = [s for s in d.slots if s.pool == p.name]
            assert len({s.node for s in mine}) == p.nodes
            assert all(len(s.gpus) == p.gpus_per_node for s in mine)
        for s in d.slots:
            for g in s.gpus:
                assert 0 <= g < size[s.node] and (s.node, g) not in taken
                taken.add((s.node, g))
        u = use.setdefault(run.user, [0, 0])
        u[0] += run.gpus
        u[1] += 1
        lim = limits.get(run.user)
        if lim is not None and lim.max_gpus is not None:
            assert u[0] <= lim.max_gpus
        if lim is not None and lim.max_runs is not None:
            assert u[1] <= lim.max_runs
    assert plan(queue, inventory, held, limits) == decisions  # deterministic


def fair_order(queue: list[QueuedRun], held: list[Holding], starts: set[str]) -> list[str]:
    """The order fair share defines, one run at a time: the highest priority, then the user
    holding the fewest GPUs (counting the runs started so far), then the oldest run."""
    gpus: dict[str, int] = {}
    for h in held:
        gpus[h.user] = gpus.get(h.user, 0) + len(h.gpus)
    left, order = list(queue), []
    while left:
        top = max(r.priority for r in left)
        run = min(
            (r for r in left if r.priority == top),
            key=lambda r: (gpus.get(r.user, 0), r.created_at, r.id),
        )
        left.remove(run)
        order.append(run.id)
        if run.id in starts:
            gpus[run.user] = gpus.get(run.user, 0) + run.gpus
    return order


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_a_pass_considers_the_queue_in_fair_share_order_whether_or_not_more_can_start(
    scenario: tuple[list[NodeDef], list[Holding], list[QueuedRun], dict],
) -> None:
    inventory, held, queue, limits = scenario
    decisions = plan(queue, inventory, held, limits, explain_all=True)
    assert [d.run_id for d in decisions] == fair_order(queue, held, set(started(decisions)))


def test_once_nothing_more_can_start_the_rest_still_goes_by_gpus_held_then_age() -> None:
    held = [holding("r-c", "h200-1", 8, user="carol"), holding("r-a", "h200-2", 4, user="alice")]
    users = ["carol", "alice", "bob", "dave"]
    queue = [queued(f"r-{i}", pool(8), user=users[i % 4], at=i) for i in range(12)]
    decisions = plan(queue, INVENTORY, held, explain_all=True)
    assert started(decisions) == []  # no h200 node has 8 free GPUs: nothing more can start
    order = [d.run_id for d in decisions]
    assert order == fair_order(queue, held, set())
    # bob and dave (no GPUs) by age, then alice (4 GPUs), then carol (8)
    assert order[:6] == ["r-2", "r-3", "r-6", "r-7", "r-10", "r-11"]
    assert order[6:] == ["r-1", "r-5", "r-9", "r-0", "r-4", "r-8"]
