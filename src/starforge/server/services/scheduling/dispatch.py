"""Dispatch: turn queued runs into started attempts, and notice runners that went away.

A scheduler pass (:func:`schedule_pass`) walks the queue in order (priority, then age) and, for
each run that fits, writes in ONE transaction (the pass's; a run whose files cannot be written
stays queued and the others are placed): ``queued -> starting``, a new attempt row with its
allocation and per-node records, two fresh tokens (the runner's, for lifecycle events, and the
job's, for metrics ingest; only their sha256 is stored) and the per-node binding files. Only
after that commit does :func:`start_attempts` ask the executor to start each node and record the
references (a pass's starts in one transaction). A start failure ends the attempt as
``startup_failed`` (that attempt's only: the other starts of the pass stand). An executor that
starts whole attempts (Slurm: one ``sbatch`` each) is asked for a pass's attempts concurrently, at
most :data:`GANG_START_WORKERS` at once, so a sweep placed in one pass does not wait for its
submissions one after another; the outcomes are recorded in the pass's order all the same.

An attempt after the first (resume, retry, auto-retry) starts from the run's latest checkpoint
(``services/runs/checkpoints``), recorded on the attempt and handed to the runner as
``resume_from``. An attempt number is never used twice, even when the database is older than the
run's folder (a restored backup): the next number is past both the database's and the folder's last
attempt (:func:`attempts_on_disk`), so a new attempt never meets an old one's logs and records.

Node records are written through ``statemachine.place_nodes`` (each ``pending``) and
``statemachine.node_event`` (``started`` with the reference; ``startup_failed`` for nodes a failed
start never reached). The reconciler (``services/runs/reconcile``) settles nodes whose runner went
away. Both are safe to kill at any line and rerun: they act only on what the database says. A queued
run is claimed under a row lock (:func:`claim_queued`), so no run is placed twice, even by two
passes.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from starforge.catalog.adapters import planned
from starforge.catalog.loader import get_method
from starforge.contract.env import Binding, make_binding
from starforge.contract.jobspec import JobSpec, Manifest
from starforge.contract.layout import RunLayout
from starforge.contract.nodes import NodeRecord
from starforge.contract.packs import read_extents
from starforge.contract.profiles import Pool
from starforge.contract.states import ACTIVE, JobStatus, NodeEvent, NodeState
from starforge.runner import unpack
from starforge.server import statemachine
from starforge.server.containers import runtime_for_runs
from starforge.server.db import packs
from starforge.server.db.models import Attempt, Run, User, utcnow
from starforge.server.executors.base import NodeLaunch, SupportsGangStart
from starforge.server.runtime import Runtime
from starforge.server.services.access import isolation
from starforge.server.services.access.users import token_digest
from starforge.server.services.runs import admission, checkpoints, lifecycle
from starforge.server.services.scheduling import queue, scheduler
from starforge.server.services.workflows import sweeps
from starforge.server.storage import Storage

log = logging.getLogger(__name__)
PLANNED_UNPACK_MAX_BYTES = 64 << 20
# Concurrent whole-attempt starts of one pass (each mostly waits on sbatch and slurmctld): enough
# for a sweep's submissions to overlap, few enough not to flood the controller.
GANG_START_WORKERS = 8


@dataclass(frozen=True)
class StartOrder:
    run_id: str
    attempt: int
    nodes: list[NodeLaunch]
    pools: list[Pool] = field(default_factory=list)
    image: str = ""


def active_attempts(session: Session, *, lock: bool = False) -> list[tuple[Run, Attempt]]:
    """Current, unfinished attempts of runs that hold (or are about to hold) resources."""
    query = (
        select(Run, Attempt)
        .join(Attempt, Attempt.run_id == Run.id)
        .where(
            Run.status.in_([s.value for s in ACTIVE]),
            Attempt.number == Run.current_attempt,
            Attempt.ended_at.is_(None),
        )
    )
    if lock:  # the reconciler rewrites these rows (a no-op on SQLite, where writers are serial)
        query = query.with_for_update()
    return [(run, attempt) for run, attempt in session.execute(query).all()]


def held_gpus(session: Session) -> list[tuple[str, tuple[int, ...]]]:
    """(node, GPU indices) of every active attempt: three columns, no run or attempt loaded."""
    return [(h.node, h.gpus) for h in queue.to_holdings(session.execute(queue.HOLDINGS).all())]


def run_dir_of(rt: Runtime, run: Run) -> Path:
    return rt.storage.layout_of(run).dir


# ---- scheduling -------------------------------------------------------------------------------


def schedule_pass(rt: Runtime) -> list[StartOrder]:
    """Decide the whole queue at once (``scheduler.plan``: priority, fair share, quotas, gang,
    reservations), then commit each start in its own transaction, re-checking that the run is
    still queued and its GPUs still free, then store the reasons of the runs that wait."""
    if not queue.needs_pass(rt):  # a full cluster whose queue is explained: nothing to do
        return []
    # An executor that knows its nodes (Slurm) says which can take work; while it cannot tell
    # (Slurm's controller is down) nothing is placed, so no queued run fails for it.
    if not rt.refresh_inventory():
        return []
    snap = queue.read_snapshot(rt)  # one consistent read that holds no write lock
    decisions = queue.decide(rt, snap)  # kept for views: they read it instead of planning
    orders: list[StartOrder] = []
    starts = [d for d in decisions if d.slots is not None]
    if starts:
        with rt.transaction() as session:  # the pass's placements, committed together
            for decision in starts:
                placed = _place_decided(rt, session, decision.run_id, decision.slots or [])
                if placed is not None:
                    orders.append(placed)
    queue.save_reasons(rt, snap, decisions)
    return orders


def _place_decided(
    rt: Runtime, session: Session, run_id: str, slots: list[scheduler.Slot]
) -> StartOrder | None:
    """Place one run the pass chose, in the pass's transaction. A run whose files cannot be
    written is left queued for the next pass (``place_run`` writes them before any row), and
    the others' placements stand; a database error fails the whole pass, which starts nothing."""
    rows = claim_queued(session, run_id)
    if rows is None:
        return None  # stopped meanwhile, or another pass holds it
    free = scheduler.free_gpus(rt.inventory, held_gpus(session))
    if not scheduler.slots_are_free(slots, free):
        return None  # the next pass decides it again
    try:
        return place_run(rt, session, rows, free, slots=slots)
    except OSError:
        log.exception("could not write the files of %s; it stays queued", run_id)
        return None


def claim_queued(session: Session, run_id: str) -> statemachine.Rows | None:
    """Lock ``run_id`` for this transaction if it is still queued and no one else holds it; the
    run as a row outside the unit of work (``statemachine.load``).

    On PostgreSQL the row lock (``FOR UPDATE SKIP LOCKED``) is what keeps two passes (of an old
    and a new leader, say) from placing one run twice: the second one skips the row, and once the
    first commits the run is no longer queued. On SQLite writers are serial and this is a read."""
    return statemachine.load(session, run_id, attempt=0, queued=True)


def place_run(
    rt: Runtime,
    session: Session,
    rows: statemachine.Rows,
    free: dict[str, scheduler.FreeNode],
    slots: list[scheduler.Slot] | None = None,
) -> StartOrder | None:
    """Write the placement of the run of ``rows`` (claimed): ``slots`` the pass chose, else a
    best fit in ``free``. Its files (``run.json``, the bindings) are written first: a run whose
    files cannot be written (OSError) has nothing of this placement in the transaction."""
    run = rows.run
    pools = admission.run_pools(run)
    slots = slots if slots is not None else scheduler.place(pools, free)
    if slots is None:
        reason = scheduler.shortfall(pools, free)
        statemachine.set_reason(run, reason)  # why it waits is not a status change: no event
        statemachine.save(session, rows)
        return None
    run_dir = run_dir_of(rt, run)
    on_disk = attempts_on_disk(RunLayout(run_dir))
    number = max(run.current_attempt, on_disk) + 1
    skipped = (
        f" (the run's folder holds attempt {on_disk}, which the database does not know: "
        "restored from an older backup?)"
        if on_disk > run.current_attempt
        else ""
    )
    token = secrets.token_urlsafe(32)  # the runner's: lifecycle
    job_token = secrets.token_urlsafe(32)  # the job's: ingest into this run only
    attempt = Attempt(
        run_id=run.id,
        number=number,
        allocation=[s.to_json() for s in slots],
        started_at=utcnow(),
        log_path=str(rt.storage.log_path(run_dir, number, 0)),
    )
    statemachine.place_nodes(attempt, {s.rank: NodeRecord(node=s.node, pool=s.pool) for s in slots})
    # A resumed, retried or auto-retried run continues from its latest checkpoint.
    latest = checkpoints.latest(RunLayout(run_dir).out) if number > 1 else None
    attempt.resumed_from = str(latest.path) if latest else None
    # The packed blobs' extents are read in this transaction, not in one of their own.
    storage = Storage(rt.storage.root, locate=lambda digests: packs.locate(session, digests))
    starts = write_bindings(
        rt,
        run,
        number,
        slots,
        pools,
        token,
        resume_from=attempt.resumed_from or "",
        job_ids=job_identity(rt, session, run.user),
        job_user=isolation.job_account(rt, session, run.user),
        job_token=job_token,
        storage=storage,
        sync_steps=sweeps.rungs_of(session, run.id),
    )
    rows.attempt = attempt  # inserted by save
    run.current_attempt = number
    run.run_token_sha256 = token_digest(token)
    run.job_token_sha256 = token_digest(job_token)
    where = ", ".join(f"{s.node}[{','.join(map(str, s.gpus))}]" for s in slots)
    statemachine.transition(
        session,
        run,
        JobStatus.STARTING,
        reason=f"attempt {number} placed on {where}{skipped}",
        actor="scheduler",
    )
    statemachine.save(session, rows)
    # The image as admission chose and pinned it (IMAGE@sha256:...): a retag is moot.
    return StartOrder(run.id, number, starts, pools=pools, image=run.image)


def attempts_on_disk(layout: RunLayout) -> int:
    """The highest attempt number something ran under in the run's folder (its logs, runner and
    exit records, report spools), 0 for none. A binding alone is no use of its number: bindings
    are written in the placement's transaction, before it commits, so a leader killed before the
    commit leaves one of an attempt that never was, and the next placement takes that number."""
    highest = 0
    for folder in (layout.logs, layout.state):
        try:
            names = [entry.name for entry in os.scandir(folder)]
        except (FileNotFoundError, NotADirectoryError):
            continue
        for name in names:
            if name.endswith(f".{RunLayout.BINDING}"):
                continue
            number = RunLayout.attempt_of(name)
            if number is not None and number > highest:
                highest = number
    return highest


def job_identity(rt: Runtime, session: Session, user: str) -> tuple[list[int], int]:
    """The uid range the attempt's runners take a uid from, and its member's group; none where
    the server does not give runs identities of their own."""
    uids = rt.settings.job_uids
    if not uids:
        return [], 0
    member = session.scalar(select(User.id).where(User.name == user))
    return uids, rt.settings.member_gid(member or 0)


def framework_of(spec: dict[str, Any]) -> str:
    """The framework of the run's method (``trl`` of ``trl/sft``); "" when unreadable."""
    method = spec.get("method") if isinstance(spec, dict) else None
    ident = method.get("id") if isinstance(method, dict) else None
    return ident.split("/", 1)[0] if isinstance(ident, str) else ""


def with_plan(run: Run, binding: Binding) -> Binding:
    """``binding`` with the launch plan its runner would compile, where the server can compile
    it (``catalog/adapters/planned.py``), and the package unpacked into the run's work dir (the
    runner's own unpack): a cold runner then starts the job before its imports
    (``runner/quick.py``). A package over ``PLANNED_UNPACK_MAX_BYTES`` is left to the runner, so
    that a placement never waits long on a copy."""
    try:
        spec = JobSpec.read(run.spec)
        plan = planned.precompile(spec, get_method(spec.method.id), binding, run.config)
        if plan is None:
            return binding
        data = json.loads(RunLayout(Path(binding.run_dir)).run_json.read_text())
        manifest = Manifest.read(data["manifest"])
        if manifest.total_bytes > PLANNED_UNPACK_MAX_BYTES:
            return binding
        packs = read_extents(data.get("packs"))
        unpack.unpack(manifest, Path(binding.storage_root), Path(binding.work_dir), packs)
    except Exception:  # the runner compiles and unpacks itself, and its log says what is wrong
        log.debug("no launch plan for run %s", run.id, exc_info=True)
        return binding
    plan = plan.model_copy(update={"unpacked": unpack.manifest_digest(manifest)})
    return binding.model_copy(update={"launch": plan})


def write_bindings(
    rt: Runtime,
    run: Run,
    number: int,
    slots: list[scheduler.Slot],
    pools: list[Pool],
    token: str,
    *,
    resume_from: str = "",
    job_token: str = "",
    storage: Storage | None = None,
    job_ids: tuple[list[int], int] = ([], 0),
    job_user: str | None = None,
    sync_steps: list[int] | None = None,
) -> list[NodeLaunch]:
    """Write the run's ``run.json`` (once; through ``storage``, the runtime's by default) and
    each node's binding; what to start. ``job_user``: the member's Unix account on Slurm
    (``isolation.job_account``), else the server's ``job_user`` setting."""
    run_dir = run_dir_of(rt, run)
    if not rt.storage.run_json_path(run_dir).exists():  # written once, from the database
        (storage or rt.storage).write_run_json(run_dir, run.spec, run.manifest, run.config)
    rt.storage.make_run_dir(run_dir)
    port = rt.pick_port()
    starts = []
    for slot in slots:
        log_path = rt.storage.log_path(run_dir, number, slot.rank)
        # The pools carry the profile's env as admitted: today's settings do not reach the run.
        binding = make_binding(
            run_id=run.id,
            attempt=number,
            user=run.user,
            storage_root=str(rt.storage.root),
            run_dir=str(run_dir),
            log_path=str(log_path),
            pools=pools,
            pool=slot.pool,
            node_rank=slot.rank,
            nnodes=len(slots),
            visible_devices=list(slot.gpus),
            master_port=port,
            endpoint=rt.url,
            run_token=token,
            resume_from=resume_from,
            hf_offline=rt.settings.hf_offline,
            job_token=job_token,
            tls_ca=rt.settings.tls_ca_pem(),
            job_user=rt.settings.job_user_name if job_user is None else job_user,
            # A member's own account reads no store: the Slurm executor stages the run first.
            staged=job_user is not None,
            job_uids=job_ids[0],
            job_gid=job_ids[1],
            image=run.image,
            containers=runtime_for_runs(rt.settings.containers),
            framework=framework_of(run.spec),
            sync_steps=sync_steps,
        )
        if isinstance(rt.executor, SupportsGangStart):  # a cold runner per node (Slurm)
            binding = with_plan(run, binding)
        path = rt.storage.binding_path(run_dir, number, slot.rank)
        rt.storage.write_binding(path, binding.model_dump(mode="json"))
        starts.append(NodeLaunch(slot.rank, path, log_path, slot.node, slot.pool, list(slot.gpus)))
    return starts


def start_attempt(rt: Runtime, order: StartOrder) -> None:
    """Start every node of a committed placement, then record what was started."""
    start_attempts(rt, [order])


def start_attempts(rt: Runtime, orders: list[StartOrder]) -> None:
    """Start the nodes of committed placements (a pass's, in order), then record what was
    started, all in one transaction; then act on each outcome. A runner may report before its
    start is recorded: the node table takes that order too (``contract/states``), and a leader
    that dies first leaves runner records its successor adopts (``loops/takeover``)."""
    if not orders:
        return
    results = _start_all(rt, orders)
    started = [(order, *result) for order, result in zip(orders, results, strict=True)]
    outcomes = []
    with rt.transaction() as session:
        for order, refs, error in started:
            rows = statemachine.load(session, order.run_id, attempt=order.attempt)
            assert rows is not None
            grace = rt.settings.pause_grace_s
            outcomes.append(record_starts(session, rows, refs, error, pause_grace_s=grace))
            statemachine.save(session, rows)
    for outcome in outcomes:
        lifecycle.act_on(rt, outcome)


def _start_all(rt: Runtime, orders: list[StartOrder]) -> list[tuple[dict[int, str], str | None]]:
    """Each order's (references, error), in the order of ``orders``. Whole-attempt starts run on
    a few threads at once (each one's failure is caught in :func:`_start_nodes`, so it stays that
    attempt's startup failure); node-by-node starts (the local executor) stay one at a time."""
    if len(orders) == 1 or not isinstance(rt.executor, SupportsGangStart):
        return [_start_nodes(rt, order) for order in orders]
    workers = min(GANG_START_WORKERS, len(orders))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sf-start") as pool:
        return list(pool.map(lambda order: _start_nodes(rt, order), orders))


def _start_nodes(rt: Runtime, order: StartOrder) -> tuple[dict[int, str], str | None]:
    """Ask the executor to start the attempt: as one unit where it can (Slurm: one job per
    attempt, named so that a second try finds the first), else node by node."""
    if isinstance(rt.executor, SupportsGangStart):
        name = f"sf.{order.run_id}.{order.attempt}"
        try:
            return rt.executor.start_attempt(name, order.nodes, order.pools, order.image), None
        except Exception as exc:  # nothing was started: the executor's own words, in the log
            error = f"could not start the attempt: {getattr(exc, 'message', None) or exc}"
            log.exception("starting %s attempt %s", order.run_id, order.attempt)
            _note_in_log(order.nodes[0].log_path, error)
            return {}, error
    refs: dict[int, str] = {}
    error: str | None = None
    for node in order.nodes:
        try:
            refs[node.rank] = rt.executor.start(node.binding_path, node.log_path)
        except Exception as exc:  # any failure to launch is the run's startup failure
            error = f"could not start the runner of node {node.rank}: {exc}"
            log.exception("starting %s attempt %s node %s", order.run_id, order.attempt, node.rank)
            _note_in_log(node.log_path, error)
            break
    return refs, error


def record_starts(
    session: Session,
    rows: statemachine.Rows,
    refs: dict[int, str],
    error: str | None,
    *,
    pause_grace_s: float | None = None,
) -> lifecycle.Outcome:
    """Record the started nodes' references on the attempt of ``rows`` (and a failed start's
    end); the caller saves the rows."""
    run, attempt = rows.run, rows.attempt
    assert attempt is not None
    for rank, ref in sorted(refs.items()):
        statemachine.node_event(attempt, rank, NodeEvent.STARTED, ref=ref)
    if error is not None and attempt.ended_at is None:
        for rank, node in attempt.node_records().items():
            if node.state is NodeState.PENDING:  # never started: the start failed before it
                statemachine.node_event(attempt, rank, NodeEvent.STARTUP_FAILED, why=error)
        outcome = lifecycle.finish_attempt(session, run, attempt, "scheduler")
        if outcome is not None:
            return outcome
    if attempt.ended_at is not None or run.status in (JobStatus.STOPPING, JobStatus.PAUSING):
        # A stop or pause (or the attempt's end) landed while the nodes were being started.
        nodes = attempt.node_records()
        live = [ref for rank, ref in refs.items() if not nodes[rank].exited]
        pausing = run.status == JobStatus.PAUSING and attempt.ended_at is None
        grace = pause_grace_s if pausing else None
        return lifecycle.Outcome(True, "stop after start", stop_refs=live, grace_s=grace)
    return lifecycle.Outcome(True, "started")


def _note_in_log(path: Path, message: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"starforge: {message}\n")
    except OSError:
        log.warning("could not write to %s", path)
