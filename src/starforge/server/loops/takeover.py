"""Taking over: finish the starts a leader that died left half-done, then lead.

A scheduler pass commits a placement first and starts the runners after
(``services/scheduling/dispatch``), so a leader killed in between leaves nodes that are ``pending``
with no executor reference. Once this process is elected, the old leader is gone (its database
session, and with it the lock, is gone), so nothing else will start those nodes:

1. if there are any, wait :data:`GRACE_S`: a runner the old leader launched just before dying
   writes its runner record first thing, and the reconciler adopts it from that record;
2. start each node that still has neither a runner record nor an exit record, as the attempt it
   was placed as (its binding file is on disk already, pointed now at this process's URL): its
   first and only start.

So a run whose placement was committed is started exactly once, as attempt 1, even across a
``kill -9`` of the leader, instead of ending as ``startup_failed``.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from starforge.contract.layout import RunLayout
from starforge.contract.states import JobStatus, NodeState
from starforge.server.executors.base import NodeLaunch
from starforge.server.runtime import Runtime
from starforge.server.services.runs import admission
from starforge.server.services.scheduling import dispatch

log = logging.getLogger(__name__)
GRACE_S = 5.0


def interrupted(rt: Runtime) -> list[dispatch.StartOrder]:
    """Placed nodes whose runner no one started or recorded (read-only)."""
    orders = []
    with rt.transaction() as session:
        for run, attempt in dispatch.active_attempts(session):
            if run.status != JobStatus.STARTING:
                continue
            run_dir = dispatch.run_dir_of(rt, run)
            layout = RunLayout(run_dir)
            nodes = []
            slots = {int(slot["rank"]): slot for slot in attempt.allocation or []}
            for rank, node in sorted(attempt.node_records().items()):
                if node.state is not NodeState.PENDING or node.ref is not None:
                    continue
                if layout.runner_record(attempt.number, rank).exists():
                    continue  # launched: the reconciler adopts it
                if layout.exit_record(attempt.number, rank).exists():
                    continue  # launched and done: the reconciler settles it
                nodes.append(
                    NodeLaunch(
                        rank,
                        rt.storage.binding_path(run_dir, attempt.number, rank),
                        rt.storage.log_path(run_dir, attempt.number, rank),
                        node=node.node,
                        pool=node.pool,
                        gpus=list(slots.get(rank, {}).get("gpus", [])),
                    )
                )
            if nodes:
                image = str((run.spec or {}).get("image") or "")
                pools = admission.run_pools(run)
                orders.append(dispatch.StartOrder(run.id, attempt.number, nodes, pools, image))
    return orders


def finish_interrupted_starts(rt: Runtime, grace_s: float = GRACE_S) -> int:
    """Start what a dead leader placed but never started; returns how many attempts."""
    if not interrupted(rt):
        return 0
    time.sleep(grace_s)  # runs in a worker thread: let just-launched runners write their records
    orders = interrupted(rt)
    with rt.loop_lock:
        for order in orders:
            for node in order.nodes:
                readdress(rt, node.binding_path)
            log.warning(
                "starting %s attempt %s: its leader died first", order.run_id, order.attempt
            )
            dispatch.start_attempt(rt, order)
    return len(orders)


def readdress(rt: Runtime, binding_path: Path) -> None:
    """Point a binding written by the dead leader at this process (when it has a URL)."""
    if not rt.url:
        return
    binding = json.loads(binding_path.read_text(encoding="utf-8"))
    binding["endpoint"] = rt.url
    rt.storage.write_binding(binding_path, binding)
