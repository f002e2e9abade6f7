"""What runners report (starting, running, heartbeat, exited) and how an attempt ends.

Each node of an attempt has a record in ``attempts.nodes_json`` keyed by node rank:
``{"node", "ref", "state": pending|started|starting|running|exited, "exit_code", "lost",
"beat"}`` (``beat``: the epoch time of its latest heartbeat). Events are idempotent: a duplicate
or stale event (an older attempt, a node that already exited, a run that already ended) changes
nothing and is answered ``accepted=False``; for a heartbeat that answer tells the runner its
attempt is over, and it stops its training (so an attempt never has two live runners).

The end of an attempt is decided by :func:`decide`, a pure function of the run's status and the
nodes' records. Then :func:`finish_attempt` writes it and, for a platform failure, applies the
method's auto-retry policy in the same transaction: ``failed`` (with the reason) then ``queued``
again (actor ``auto-retry``), so no reader ever sees a retried run as final.
"""

from __future__ import annotations

import hmac
import os
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from starforge.catalog.loader import get_method
from starforge.catalog.schema import AutoRetry
from starforge.contract.api import ControlPlane, LifecycleEvent
from starforge.contract.atomic import write_json_atomic
from starforge.contract.errors import Forbidden, RunNotFound, StarForgeError, Unauthorized
from starforge.contract.states import EndReason, JobStatus
from starforge.server import statemachine
from starforge.server.db.models import Attempt, Run, utcnow
from starforge.server.runtime import Runtime
from starforge.server.services import checkpoints
from starforge.server.services.users import token_digest

EXITED = "exited"
# Exit codes of a node that was asked to pause: saved and exited 143 (SIGTERM), killed after the
# grace period (137), or a script that treats SIGTERM as a clean exit (0).
PAUSE_EXITS = frozenset({0, 128 + 15, 128 + 9})


@dataclass(frozen=True)
class Decision:
    status: JobStatus
    end_reason: EndReason
    exit_code: int | None
    reason: str


def _ranked(nodes: dict[str, dict[str, object]]) -> list[tuple[str, dict[str, object]]]:
    return sorted(nodes.items(), key=lambda kv: int(kv[0]))


def _failure(rank: str, node: dict[str, object]) -> Decision:
    """Why one node failed the attempt: lost (no exit seen) or its own exit code."""
    if node.get("lost"):
        lost_reason = EndReason.NODE_LOST
        if node.get("end_reason") == EndReason.STARTUP_FAILED.value:
            lost_reason = EndReason.STARTUP_FAILED
        return Decision(
            JobStatus.FAILED,
            lost_reason,
            None,
            f"node {rank} ({node.get('node', '?')}) was lost: "
            f"{node.get('why') or 'its runner ended without reporting an exit'}",
        )
    code = node.get("exit_code")
    exit_code = code if isinstance(code, int) else None
    try:
        end_reason = EndReason(str(node.get("end_reason")))
    except ValueError:
        end_reason = EndReason.EXIT_NONZERO
    if end_reason in (EndReason.COMPLETED, EndReason.PAUSED_BY_USER, EndReason.STOPPED_BY_USER):
        end_reason = EndReason.EXIT_NONZERO
    return Decision(JobStatus.FAILED, end_reason, exit_code, f"node {rank} exited with code {code}")


def _decide_pause(nodes: dict[str, dict[str, object]]) -> Decision | None:
    """A pausing attempt waits for every node (a distributed save needs all ranks) unless one
    crashed; signal exits and lost nodes make it paused, from its latest complete checkpoint."""
    exited = [(r, n) for r, n in _ranked(nodes) if n.get("state") == EXITED]
    crashed = [(r, n) for r, n in exited if not n.get("lost") and n["exit_code"] not in PAUSE_EXITS]
    if crashed:
        return _failure(*crashed[0])
    if len(exited) < len(nodes):
        return None
    codes = [n.get("exit_code") for _, n in exited if isinstance(n.get("exit_code"), int)]
    code = next((c for c in codes if c != 0), codes[0] if codes else None)
    return Decision(JobStatus.PAUSED, EndReason.PAUSED_BY_USER, code, "paused by user")


def decide(run_status: JobStatus, nodes: dict[str, dict[str, object]]) -> Decision | None:
    """How the attempt ends given its nodes' records, or None while it is still going."""
    if run_status is JobStatus.PAUSING:
        return _decide_pause(nodes)
    exited = {r: n for r, n in nodes.items() if n.get("state") == EXITED}
    bad = {r: n for r, n in exited.items() if n.get("lost") or n.get("exit_code") != 0}
    if len(exited) < len(nodes) and not bad:
        return None
    first_bad = min(bad.items(), key=lambda kv: int(kv[0])) if bad else None
    codes = [n.get("exit_code") for _, n in _ranked(exited)]
    code = first_bad[1].get("exit_code") if first_bad else (codes[0] if codes else None)
    exit_code = code if isinstance(code, int) else None
    if run_status is JobStatus.STOPPING:
        return Decision(JobStatus.STOPPED, EndReason.STOPPED_BY_USER, exit_code, "stopped by user")
    if first_bad is None:
        return Decision(JobStatus.SUCCEEDED, EndReason.COMPLETED, 0, "completed")
    return _failure(*first_bad)


@dataclass
class Outcome:
    """What a caller must do after the transaction that recorded an event committed."""

    accepted: bool
    message: str
    stop_refs: list[str] = field(default_factory=list)  # SIGTERM, SIGKILL after the grace
    ended: bool = False
    kill_refs: list[str] = field(default_factory=list)  # lost runners' groups: SIGKILL now
    grace_s: float | None = None  # None: the server's stop grace period


def check_run_token(run: Run, token: str | None) -> None:
    if not token:
        raise Unauthorized("the lifecycle endpoint needs the run token header")
    if run.run_token_sha256 is None or not hmac.compare_digest(
        run.run_token_sha256, token_digest(token)
    ):
        raise Forbidden(f"this token is not valid for run {run.id}")


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
    out_dir = rt.storage.run_dir(run.user, run.project, run.experiment, run.id) / "out"
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
    decision = decide(JobStatus(run.status), attempt.nodes)
    if decision is None:
        return None
    attempt.ended_at = utcnow()
    attempt.exit_code = decision.exit_code
    attempt.end_reason = decision.end_reason.value
    run.exit_code = decision.exit_code
    verdict = judge_retry(rt, run, decision) if rt is not None else None
    reason = decision.reason + (verdict.note if verdict and not verdict.retry else "")
    if rt is not None and decision.status is JobStatus.PAUSED:
        out_dir = rt.storage.run_dir(run.user, run.project, run.experiment, run.id) / "out"
        kept = checkpoints.latest(out_dir)
        reason += f"; latest checkpoint {kept.name} (step {kept.step})" if kept else ""
    statemachine.transition(
        session, run, decision.status, reason=reason, actor=actor, end_reason=decision.end_reason
    )
    if verdict is not None and verdict.retry:
        run.auto_retries += 1
        statemachine.transition(
            session, run, JobStatus.QUEUED, reason=verdict.note, actor="auto-retry"
        )
    nodes = attempt.nodes.values()
    stop_refs = [n["ref"] for n in nodes if n.get("ref") and n.get("state") != EXITED]
    kill_refs = [n["ref"] for n in nodes if n.get("ref") and n.get("lost")]
    return Outcome(True, f"run {run.id} {run.status}", stop_refs, ended=True, kill_refs=kill_refs)


# ---- runner events -----------------------------------------------------------------------------


def record_exit(
    node: dict[str, object],
    exit_code: int | None,
    *,
    lost: bool = False,
    end_reason: str | None = None,
    why: str = "",
) -> None:
    node.update(state=EXITED, exit_code=exit_code, lost=lost)
    if end_reason:
        node["end_reason"] = end_reason
    if why:
        node["why"] = why


def apply_event(
    session: Session, run: Run, ev: LifecycleEvent, *, rt: Runtime | None = None
) -> Outcome:
    """Record one runner event in the caller's transaction."""
    attempt = run.current
    if attempt is None or ev.attempt != run.current_attempt or attempt.ended_at is not None:
        return Outcome(False, f"attempt {ev.attempt} of run {run.id} is not running; ignored")
    nodes = attempt.nodes
    node = nodes.get(str(ev.node_rank))
    if node is None:
        return Outcome(False, f"attempt {ev.attempt} has no node {ev.node_rank}; ignored")
    if node.get("state") == EXITED:
        return Outcome(False, f"node {ev.node_rank} already exited; ignored")
    actor = f"runner:{ev.node_rank}"
    now = utcnow()
    node["beat"] = now.timestamp()  # any event proves the runner is alive
    attempt.heartbeat_at = now
    if ev.event == "heartbeat":
        attempt.set_nodes(nodes)
        return Outcome(True, f"node {ev.node_rank} beats")
    if ev.event == "exited":
        record_exit(
            node,
            ev.exit_code if ev.exit_code is not None else -1,
            end_reason=ev.end_reason.value if ev.end_reason else None,
        )
        attempt.set_nodes(nodes)
        outcome = finish_attempt(session, run, attempt, actor, rt=rt)
        return outcome or Outcome(True, f"node {ev.node_rank} exited")
    if node.get("state") != "running":
        node["state"] = ev.event
    attempt.set_nodes(nodes)
    if ev.event == "running" and run.status == JobStatus.STARTING:
        statemachine.transition(
            session, run, JobStatus.RUNNING, reason="the entrypoint runs", actor=actor
        )
    return Outcome(True, f"node {ev.node_rank} {ev.event}")


def handle(rt: Runtime, run_id: str, token: str | None, ev: LifecycleEvent) -> Outcome:
    with rt.transaction() as session:
        run = session.get(Run, run_id, with_for_update=True)
        if run is None:
            raise RunNotFound(f"no run {run_id}")
        check_run_token(run, token)
        outcome = apply_event(session, run, ev, rt=rt)
    act_on(rt, outcome)
    return outcome


def publish_beacon(rt: Runtime) -> None:
    """Tell runners where this server is and how often to beat (its URL changes per start)."""
    if not rt.url:
        return
    beacon = ControlPlane(
        url=rt.url, heartbeat_s=rt.settings.heartbeat_s, pid=os.getpid(), started_at=rt.started_at
    )
    write_json_atomic(rt.storage.layout.beacon, beacon.model_dump(mode="json"))


def act_on(rt: Runtime, outcome: Outcome) -> None:
    """The side effects of a committed outcome: stop leftover nodes, wake the scheduler."""
    grace = rt.settings.stop_grace_s if outcome.grace_s is None else outcome.grace_s
    for ref in outcome.stop_refs:
        rt.executor.stop(ref, grace)
    kill = getattr(rt.executor, "kill", None)  # optional: for groups that outlive their runner
    for ref in outcome.kill_refs if callable(kill) else []:
        kill(ref)  # whatever a lost runner left behind must not train on
    if outcome.ended:
        rt.wake_scheduler()
