"""What runners report (starting, running, exited) and how an attempt ends.

Each node of an attempt has a record in ``attempts.nodes_json`` keyed by node rank:
``{"node", "ref", "state": pending|started|starting|running|exited, "exit_code", "lost"}``.
Events are idempotent: a duplicate or stale event (an older attempt, a node that already exited,
a run that already ended) changes nothing. The end of an attempt is decided by :func:`decide`,
a pure function: when every node has exited, or as soon as one exits non-zero or is lost (the
others are then stopped), the run becomes stopped (it was stopping), paused (it was pausing),
succeeded (all zero) or failed (exit_nonzero / node_lost / the runner's own end reason).
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from starforge.contract.api import LifecycleEvent
from starforge.contract.errors import Forbidden, RunNotFound, Unauthorized
from starforge.contract.states import EndReason, JobStatus
from starforge.server import statemachine
from starforge.server.db.models import Attempt, Run, utcnow
from starforge.server.runtime import Runtime
from starforge.server.services.users import token_digest

EXITED = "exited"


@dataclass(frozen=True)
class Decision:
    status: JobStatus
    end_reason: EndReason
    exit_code: int | None
    reason: str


def decide(run_status: JobStatus, nodes: dict[str, dict[str, object]]) -> Decision | None:
    """How the attempt ends given its nodes' records, or None while it is still going."""
    exited = {r: n for r, n in nodes.items() if n.get("state") == EXITED}
    bad = {r: n for r, n in exited.items() if n.get("lost") or n.get("exit_code") != 0}
    if len(exited) < len(nodes) and not bad:
        return None
    first_bad = min(bad.items(), key=lambda kv: int(kv[0]))[1] if bad else None
    codes = [n.get("exit_code") for _, n in sorted(exited.items(), key=lambda kv: int(kv[0]))]
    code = first_bad.get("exit_code") if first_bad else (codes[0] if codes else None)
    exit_code = code if isinstance(code, int) else None
    if run_status is JobStatus.STOPPING:
        return Decision(JobStatus.STOPPED, EndReason.STOPPED_BY_USER, exit_code, "stopped by user")
    if run_status is JobStatus.PAUSING and first_bad is None:
        return Decision(JobStatus.PAUSED, EndReason.PAUSED_BY_USER, exit_code, "paused by user")
    if first_bad is None:
        return Decision(JobStatus.SUCCEEDED, EndReason.COMPLETED, 0, "completed")
    rank = next(r for r, n in bad.items() if n is first_bad)
    if first_bad.get("lost"):
        lost_reason = EndReason.NODE_LOST
        if first_bad.get("end_reason") == EndReason.STARTUP_FAILED.value:
            lost_reason = EndReason.STARTUP_FAILED
        return Decision(
            JobStatus.FAILED,
            lost_reason,
            None,
            f"node {rank} ({first_bad.get('node', '?')}) was lost: "
            f"{first_bad.get('why') or 'its runner ended without reporting an exit'}",
        )
    try:
        end_reason = EndReason(str(first_bad.get("end_reason")))
    except ValueError:
        end_reason = EndReason.EXIT_NONZERO
    return Decision(
        JobStatus.FAILED, end_reason, exit_code, f"node {rank} exited with code {exit_code}"
    )


@dataclass
class Outcome:
    """What a caller must do after the transaction that recorded an event committed."""

    accepted: bool
    message: str
    stop_refs: list[str] = field(default_factory=list)
    ended: bool = False


def check_run_token(run: Run, token: str | None) -> None:
    if not token:
        raise Unauthorized("the lifecycle endpoint needs the run token header")
    if run.run_token_sha256 is None or not hmac.compare_digest(
        run.run_token_sha256, token_digest(token)
    ):
        raise Forbidden(f"this token is not valid for run {run.id}")


def finish_attempt(session: Session, run: Run, attempt: Attempt, actor: str) -> Outcome | None:
    """Apply :func:`decide` to the attempt; return what must be stopped, or None if not over."""
    decision = decide(JobStatus(run.status), attempt.nodes)
    if decision is None:
        return None
    attempt.ended_at = utcnow()
    attempt.exit_code = decision.exit_code
    attempt.end_reason = decision.end_reason.value
    run.exit_code = decision.exit_code
    statemachine.transition(
        session,
        run,
        decision.status,
        reason=decision.reason,
        actor=actor,
        end_reason=decision.end_reason,
    )
    stop_refs = [
        n["ref"] for n in attempt.nodes.values() if n.get("ref") and n.get("state") != EXITED
    ]
    return Outcome(True, f"run {run.id} {decision.status.value}", stop_refs, ended=True)


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


def apply_event(session: Session, run: Run, ev: LifecycleEvent) -> Outcome:
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
    if ev.event == "exited":
        record_exit(
            node,
            ev.exit_code if ev.exit_code is not None else -1,
            end_reason=ev.end_reason.value if ev.end_reason else None,
        )
        attempt.set_nodes(nodes)
        outcome = finish_attempt(session, run, attempt, actor)
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
        outcome = apply_event(session, run, ev)
    act_on(rt, outcome)
    return outcome


def act_on(rt: Runtime, outcome: Outcome) -> None:
    """The side effects of a committed outcome: stop leftover nodes, wake the scheduler."""
    for ref in outcome.stop_refs:
        rt.executor.stop(ref, rt.settings.stop_grace_s)
    if outcome.ended:
        rt.wake_scheduler()
