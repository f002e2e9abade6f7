"""What runners report (starting, running, heartbeat, exited) and how an attempt ends.

Each node of an attempt has a typed record (:class:`~starforge.contract.nodes.NodeRecord`) keyed
by node rank; a runner's event moves it through ``statemachine.node_event`` as the node table
(``contract/states.NODE_TRANSITIONS``) allows. Events are idempotent: a duplicate or stale event
(an older attempt, a node that already exited, a run that already ended) changes nothing and is
answered ``accepted=False``; for a heartbeat that answer tells the runner its
attempt is over, and it stops its training (so an attempt never has two live runners).

The end of an attempt is decided by :func:`decide`, a pure function of the run's status and the
nodes' typed records. Then :func:`finish_attempt` writes it and, for a platform failure, applies the
method's auto-retry policy in the same transaction: ``failed`` (with the reason) then ``queued``
again (actor ``auto-retry``), so no reader ever sees a retried run as final.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from starforge.catalog.loader import get_method
from starforge.catalog.schema import AutoRetry
from starforge.contract import spoolfiles
from starforge.contract.api import ControlPlane, LifecycleEvent
from starforge.contract.atomic import write_json_atomic
from starforge.contract.errors import Forbidden, RunNotFound, StarForgeError, Unauthorized
from starforge.contract.nodes import NodeRecord
from starforge.contract.states import EndReason, JobStatus, NodeEvent
from starforge.server import statemachine
from starforge.server.db.engine import read_only
from starforge.server.db.models import Attempt, Run, utcnow
from starforge.server.executors.base import SupportsKill
from starforge.server.runtime import Runtime
from starforge.server.services.access.users import token_digest
from starforge.server.services.observability.spooled import take as take_spool
from starforge.server.services.runs import checkpoints
from starforge.server.services.scheduling import accounting
from starforge.server.services.workflows import asha, gates

# Exit codes of a node that was asked to pause: saved and exited 143 (SIGTERM), killed after the
# grace period (137), or a script that treats SIGTERM as a clean exit (0).
PAUSE_EXITS = frozenset({0, 128 + 15, 128 + 9})
# An end reason a runner may not claim for a node that exited non-zero.
NOT_FAILURES = frozenset({EndReason.COMPLETED, EndReason.PAUSED_BY_USER, EndReason.STOPPED_BY_USER})

RELEASE_STATUSES = (JobStatus.STARTING.value, JobStatus.RUNNING.value)  # see starting_attempt

AUTO_RETRY = "auto-retry"  # the actor of a requeue the platform made by itself


@dataclass(frozen=True)
class Decision:
    status: JobStatus
    end_reason: EndReason
    exit_code: int | None
    reason: str


def _failure(rank: int, node: NodeRecord) -> Decision:
    """Why one node failed the attempt: lost (no exit seen) or its own exit code."""
    if node.lost:
        lost_reason = (
            EndReason.STARTUP_FAILED
            if node.end_reason is EndReason.STARTUP_FAILED
            else EndReason.NODE_LOST
        )
        return Decision(
            JobStatus.FAILED,
            lost_reason,
            None,
            f"node {rank} ({node.node or '?'}) was lost: "
            f"{node.why or 'its runner ended without reporting an exit'}",
        )
    end_reason = node.end_reason or EndReason.EXIT_NONZERO
    if end_reason in NOT_FAILURES:
        end_reason = EndReason.EXIT_NONZERO
    why = f": {node.why}" if node.why else ""  # what its runner said (a startup failure's cause)
    return Decision(
        JobStatus.FAILED,
        end_reason,
        node.exit_code,
        f"node {rank} exited with code {node.exit_code}{why}",
    )


def _decide_pause(nodes: Mapping[int, NodeRecord]) -> Decision | None:
    """A pausing attempt waits for every node (a distributed save needs all ranks) unless one
    crashed; signal exits and lost nodes make it paused, from its latest complete checkpoint."""
    exited = [(r, n) for r, n in sorted(nodes.items()) if n.exited]
    crashed = [(r, n) for r, n in exited if not n.lost and n.exit_code not in PAUSE_EXITS]
    if crashed:
        return _failure(*crashed[0])
    if len(exited) < len(nodes):
        return None
    codes = [n.exit_code for _, n in exited if n.exit_code is not None]
    code = next((c for c in codes if c != 0), codes[0] if codes else None)
    return Decision(JobStatus.PAUSED, EndReason.PAUSED_BY_USER, code, "paused by user")


@dataclass(frozen=True)
class Stop:
    """How a stop ends a run: its end reason and the words of its reason."""

    end_reason: EndReason
    reason: str


USER_STOP = Stop(EndReason.STOPPED_BY_USER, "stopped by user")


def stop_of(run: Run) -> Stop:
    """How ``run``'s stop ends it: as the stop asked, when it recorded its end reason on the way
    to ``stopping`` (an early stop: ``actions.begin_stop``), its words kept; else by user."""
    if run.end_reason:
        return Stop(EndReason(run.end_reason), run.reason)
    return USER_STOP


def decide(
    run_status: JobStatus, nodes: Mapping[int, NodeRecord], stop: Stop = USER_STOP
) -> Decision | None:
    """How the attempt ends given its nodes' records (by rank), or None while it still goes;
    a stopping run ends as ``stop`` says."""
    if run_status is JobStatus.PAUSING:
        return _decide_pause(nodes)
    exited = [(r, n) for r, n in sorted(nodes.items()) if n.exited]
    bad = [(r, n) for r, n in exited if n.lost or n.exit_code != 0]
    if len(exited) < len(nodes) and not bad:
        return None
    first_bad = bad[0] if bad else None
    code = first_bad[1].exit_code if first_bad else (exited[0][1].exit_code if exited else None)
    if run_status is JobStatus.STOPPING:
        return Decision(JobStatus.STOPPED, stop.end_reason, code, stop.reason)
    if first_bad is None:
        return Decision(JobStatus.SUCCEEDED, EndReason.COMPLETED, 0, "completed")
    return _failure(*first_bad)


# A user's stop while under way (``actions.stop``); it ends as :data:`USER_STOP` says.
STOP_REQUESTED = "stop requested by user"


@dataclass
class Outcome:
    """What a caller must do after the transaction that recorded an event committed."""

    accepted: bool
    message: str
    stop_refs: list[str] = field(default_factory=list)  # SIGTERM, SIGKILL after the grace
    ended: bool = False
    kill_refs: list[str] = field(default_factory=list)  # lost runners' groups: SIGKILL now
    grace_s: float | None = None  # None: the server's stop grace period
    spooled: spoolfiles.Taken | None = None  # the job's spool files stored: removed after it


def check_run_token(run: Run, token: str | None) -> None:
    """Lifecycle events take the runner's token only: the job's (its STARFORGE_TOKEN) is refused,
    so a job cannot report its own run finished while it still runs."""
    _check_run_digest(run.id, run.run_token_sha256, token)


def starting_attempt(
    session: Session, run_id: str, token: str | None, attempt: int, what: str
) -> Run:
    """Run ``run_id``, asked by its runner (its run token) for its current ``attempt`` while that
    attempt starts or runs: the only time a runner is handed ``what`` (its secrets, its
    registry login); else :class:`Forbidden` naming it."""
    run = session.get(Run, run_id)
    if run is None:
        raise RunNotFound(f"no run {run_id}")
    check_run_token(run, token)
    current = run.attempt(run.current_attempt)
    if (
        attempt != run.current_attempt
        or current is None
        or current.ended_at is not None
        or run.status not in RELEASE_STATUSES
    ):
        raise Forbidden(
            f"run {run_id} attempt {attempt} is not starting or running: no {what}",
            details={"status": run.status, "current_attempt": run.current_attempt},
        )
    return run


def _check_run_digest(run_id: str, digest: str | None, token: str | None) -> None:
    if not token:
        raise Unauthorized("the lifecycle endpoint needs the run token header")
    if digest is None or not hmac.compare_digest(digest, token_digest(token)):
        raise Forbidden(
            f"this token is not valid for run {run_id}",
            hint="lifecycle events come from the run's runner; a job reports metrics only",
        )


def authorize(rt: Runtime, run_id: str, token: str | None) -> None:
    """Refuse a request that is not from ``run_id``'s runner, before its body is read (the API's
    gate runs this from the headers; :func:`handle_many` checks again in its transaction)."""
    if not token:
        raise Unauthorized("the lifecycle endpoint needs the run token header")
    with read_only(rt.engine) as conn:
        row = conn.execute(
            select(Run.id, Run.run_token_sha256).where(Run.id == run_id)
        ).one_or_none()
    if row is None:
        raise RunNotFound(f"no run {run_id}")
    _check_run_digest(run_id, row.run_token_sha256, token)


# ---- auto-retry --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryVerdict:
    retry: bool
    note: str  # the requeue's reason, or why the failure stays final


def retry_policy(run: Run) -> AutoRetry:
    try:
        return get_method(run.method).auto_retry
    except StarForgeError:  # a method this server no longer has: the defaults
        return AutoRetry()


def retry_limit(run: Run) -> int:
    """The run's auto-retry limit: its own (chosen at submit) or its method's default."""
    return run.max_retries if run.max_retries is not None else retry_policy(run).limit


def judge_retry(rt: Runtime, run: Run, decision: Decision) -> RetryVerdict | None:
    """Whether a failed attempt is requeued automatically; None when the policy does not apply."""
    policy = retry_policy(run)
    if decision.status is not JobStatus.FAILED or decision.end_reason.value not in policy.on:
        return None
    limit = retry_limit(run)
    if run.auto_retries >= limit:
        used = f"{run.auto_retries} of {limit}" if limit else "none allowed"
        return RetryVerdict(False, f"; not retried: auto-retries used up ({used})")
    out_dir = rt.storage.layout_of(run).out
    latest = checkpoints.latest(out_dir)
    if latest is None and policy.require_checkpoint:
        return RetryVerdict(False, "; not retried: no checkpoint to resume from yet")
    start = f"resumes from {latest.name} (step {latest.step})" if latest else "starts over"
    return RetryVerdict(
        True,
        f"auto-retry {run.auto_retries + 1} of {limit} after {decision.end_reason.value}: {start}",
    )


def finish_attempt(
    session: Session, run: Run, attempt: Attempt, actor: str, *, rt: Runtime | None = None
) -> Outcome | None:
    """Apply :func:`decide` to the attempt; return what must be stopped, or None if not over.

    With ``rt`` the auto-retry policy applies and a pause's reason names the kept checkpoint."""
    nodes = attempt.node_records()
    decision = decide(JobStatus(run.status), nodes, stop_of(run))
    if decision is None:
        return None
    attempt.ended_at = utcnow()
    attempt.exit_code = decision.exit_code
    attempt.end_reason = decision.end_reason.value
    # What it held goes into the usage summaries in this same transaction (the one end of it).
    accounting.attempt_ended(
        session.connection(), run.user, run.project, run.pools, attempt.allocation,
        attempt.started_at, attempt.ended_at,
    )  # fmt: skip
    run.exit_code = decision.exit_code
    # The curves its job could not deliver, stored before the status that ends the attempt.
    spooled = take_spool(rt, session, run) if rt is not None else None
    verdict = judge_retry(rt, run, decision) if rt is not None else None
    failure = decision.reason
    if rt is not None and decision.status is JobStatus.FAILED:  # a failed eval gate says so
        failure = gates.failure_reason(rt, run, decision.exit_code) or failure
    reason = failure + (verdict.note if verdict and not verdict.retry else "")
    if decision.status is JobStatus.PAUSED and run.reason.startswith(asha.HOLD_PREFIX):
        reason = run.reason  # a sweep's hold keeps saying which rung it waits at
    if rt is not None and decision.status is JobStatus.PAUSED:
        out_dir = rt.storage.layout_of(run).out
        kept = checkpoints.latest(out_dir)
        reason += f"; latest checkpoint {kept.name} (step {kept.step})" if kept else ""
    statemachine.transition(
        session, run, decision.status, reason=reason, actor=actor, end_reason=decision.end_reason
    )
    if verdict is not None and verdict.retry:
        run.auto_retries += 1
        statemachine.transition(
            session, run, JobStatus.QUEUED, reason=verdict.note, actor=AUTO_RETRY
        )
    stop_refs = [n.live_ref for n in nodes.values() if n.live_ref]
    kill_refs = [n.ref for n in nodes.values() if n.ref and n.lost]
    return Outcome(
        True, f"run {run.id} {run.status}", stop_refs, ended=True, kill_refs=kill_refs,
        spooled=spooled,
    )  # fmt: skip


# ---- runner events -----------------------------------------------------------------------------


def apply_event(
    session: Session,
    run: Run,
    attempt: Attempt | None,
    ev: LifecycleEvent,
    *,
    rt: Runtime | None = None,
) -> Outcome:
    """Record one runner event on ``run`` and its current ``attempt``, in the caller's
    transaction."""
    if attempt is None or ev.attempt != run.current_attempt or attempt.ended_at is not None:
        return Outcome(False, f"attempt {ev.attempt} of run {run.id} is not running; ignored")
    rank = ev.node_rank
    node = attempt.node_records().get(rank)
    if node is None:
        return Outcome(False, f"attempt {ev.attempt} has no node {rank}; ignored")
    actor = f"runner:{rank}"
    now = utcnow()
    event = NodeEvent(ev.event)
    exit_code = (ev.exit_code if ev.exit_code is not None else -1) if ev.event == "exited" else None
    # Any event proves the runner is alive: its beat is stamped with the event.
    recorded = statemachine.node_event(
        attempt,
        rank,
        event,
        exit_code=exit_code,
        end_reason=ev.end_reason,
        why=ev.message if event is NodeEvent.EXITED else "",
        beat=now.timestamp(),
    )
    if recorded is None:
        if node.exited:
            return Outcome(False, f"node {rank} already exited; ignored")
        return Outcome(False, f"node {rank} is {node.state.value}; {ev.event} ignored")
    attempt.heartbeat_at = now
    if event is NodeEvent.HEARTBEAT:
        return Outcome(True, f"node {rank} beats")
    if event is NodeEvent.EXITED:
        outcome = finish_attempt(session, run, attempt, actor, rt=rt)
        return outcome or Outcome(True, f"node {rank} exited")
    if event is NodeEvent.RUNNING and run.status == JobStatus.STARTING:
        statemachine.transition(
            session, run, JobStatus.RUNNING, reason="the entrypoint runs", actor=actor
        )
    return Outcome(True, f"node {rank} {ev.event}")


def handle(rt: Runtime, run_id: str, token: str | None, ev: LifecycleEvent) -> Outcome:
    return handle_many(rt, run_id, token, [ev])[0]


def handle_many(
    rt: Runtime, run_id: str, token: str | None, events: Sequence[LifecycleEvent]
) -> list[Outcome]:
    """Apply a runner's events in order, in one transaction; then act on each outcome.

    The run and its current attempt are read and written as rows (``statemachine.load`` and
    ``save``), not through the session's unit of work: this is every runner's hot path."""
    with rt.transaction() as session:
        rows = statemachine.load(session, run_id)
        if rows is None:
            raise RunNotFound(f"no run {run_id}")
        run = rows.run
        check_run_token(run, token)
        outcomes = [apply_event(session, run, rows.attempt, ev, rt=rt) for ev in events]
        statemachine.save(session, rows)
    for outcome in outcomes:
        act_on(rt, outcome)
    return outcomes


def publish_beacon(rt: Runtime) -> None:
    """Tell runners where this server is and how often to beat (its URL changes per start)."""
    if not rt.url:
        return
    s = rt.settings
    beacon = ControlPlane(
        url=rt.url,
        heartbeat_s=s.heartbeat_s,
        report_drain_s=s.report_drain_s,
        pid=os.getpid(),
        started_at=rt.started_at,
    )
    write_json_atomic(rt.storage.layout.beacon, beacon.model_dump(mode="json"))


def act_on(rt: Runtime, outcome: Outcome) -> None:
    """The side effects of a committed outcome: stop leftover nodes, wake the scheduler."""
    grace = rt.settings.stop_grace_s if outcome.grace_s is None else outcome.grace_s
    for ref in outcome.stop_refs:
        rt.executor.stop(ref, grace)
    if isinstance(rt.executor, SupportsKill):  # for groups that outlive their runner
        for ref in outcome.kill_refs:
            rt.executor.kill(ref)  # whatever a lost runner left behind must not train on
    if outcome.spooled is not None:
        outcome.spooled.remove()
    if outcome.ended:
        rt.wake_scheduler()
