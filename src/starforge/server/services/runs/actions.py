"""User actions on a run: stop, pause, resume, retry.

Each action is a proposal answered :class:`ActionResult` accepted, or rejected with the reason
("run r-1 already succeeded"); none raises for a run in the wrong status. The decision (the new
status and its event, actor = the user) is committed before anything is signalled, so a server
that dies in between leaves a run whose status says what to finish; the reconciler forces a
stop or pause whose grace period ran out while no server was there to send SIGKILL.

- ``stop``: a run that holds nothing (queued, paused) is ``stopped`` at once; an active one goes
  ``stopping``: SIGTERM to its process groups, SIGKILL after ``stop_grace_s``. A sweep's early
  stop takes the same step (:func:`begin_stop`) with its own end reason (``early_stopped``).
- ``pause``: a queued run is held (``paused``, never started); an active one goes ``pausing``:
  SIGTERM (the training saves a checkpoint and exits), SIGKILL after ``pause_grace_s``; when its
  runners exit it is ``paused`` and its GPUs are free.
- ``resume`` (paused) and ``retry`` (failed or stopped): the same run goes back to ``queued``;
  its next attempt starts from the latest checkpoint. Both reset the auto-retry counter.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy.orm import Session

from starforge.contract.api import ActionResult
from starforge.contract.states import (
    ACTIVE,
    PAUSABLE,
    RESUMABLE,
    RETRYABLE,
    STOPPABLE,
    EndReason,
    JobStatus,
)
from starforge.server import statemachine
from starforge.server.db.models import Attempt, Run
from starforge.server.runtime import Runtime
from starforge.server.services.access import users
from starforge.server.services.runs import checkpoints, jobs, lifecycle

S = JobStatus


def live_refs(attempt: Attempt | None) -> list[str]:
    if attempt is None or attempt.ended_at is not None:
        return []
    return [n.live_ref for n in attempt.node_records().values() if n.live_ref]


def _rejected(run: Run, message: str) -> ActionResult:
    return ActionResult(accepted=False, status=S(run.status), message=message)


def _why_not(run: Run, action: str) -> str:
    """The reason an action does not apply to the run's status, and what would."""
    status = S(run.status)
    if status is S.SUCCEEDED:
        return f"run {run.id} already succeeded" + (
            "; submit again to train anew" if action in ("retry", "resume") else ""
        )
    if status.is_terminal:
        tail = {"resume": "; `sf job retry` requeues it", "pause": ""}.get(action, "")
        return f"run {run.id} already {status.value}{tail}"
    if status in (S.STOPPING, S.PAUSING):
        return f"run {run.id} is already {status.value}"
    if status is S.PAUSED:
        tail = {"retry": "; `sf job resume` continues it"}.get(action, "")
        return f"run {run.id} is already paused{tail}"
    return f"run {run.id} is {status.value}; nothing to {action}"


def _act(
    rt: Runtime,
    user: users.Caller,
    ref: str,
    action: str,
    allowed: frozenset[JobStatus],
    decide: Callable[[Session, Run], tuple[str, list[str]]],
    grace_s: float,
) -> ActionResult:
    """Lock the run, check the action applies, let ``decide`` write it, then signal."""
    with rt.transaction() as session:
        run = jobs.resolve(session, user, ref)
        session.refresh(run, with_for_update=True)  # row lock on PostgreSQL; SQLite is serial
        if S(run.status) not in allowed:
            return _rejected(run, _why_not(run, action))
        message, refs = decide(session, run)
        result = ActionResult(accepted=True, status=S(run.status), message=message)
    for node_ref in refs:  # after commit: the decision is saved before it is acted on
        rt.executor.stop(node_ref, grace_s)
    rt.wake_scheduler()
    return result


def stop(rt: Runtime, user: users.Caller, ref: str) -> ActionResult:
    """Stop a run: at once when it holds nothing, else through ``stopping`` and its runners."""

    def decide(session: Session, run: Run) -> tuple[str, list[str]]:
        refs = begin_stop(session, run, actor=user.name)
        if S(run.status) is S.STOPPING:
            return f"run {run.id} is stopping", refs
        return f"run {run.id} stopped (it held no resources)", []

    return _act(rt, user, ref, "stop", STOPPABLE, decide, rt.settings.stop_grace_s)


def begin_stop(
    session: Session, run: Run, *, actor: str, why: lifecycle.Stop | None = None
) -> list[str]:
    """Stop ``run`` in the caller's transaction (``sf job stop``, a sweep's early stop): one that
    holds nothing is ``stopped`` at once, an active one goes ``stopping``; return the nodes to
    signal once it committed. ``why``, when the stop is not a user's (an early stop), is the end
    reason and the words the run ends with; it is recorded now, with ``stopping``, so the end
    of the attempt (``lifecycle.finish_attempt``) ends it so."""
    end = why or lifecycle.USER_STOP
    if S(run.status) in ACTIVE:
        under_way = lifecycle.STOP_REQUESTED if why is None else why.reason
        asked = None if why is None else why.end_reason
        statemachine.transition(
            session, run, S.STOPPING, reason=under_way, actor=actor, end_reason=asked
        )
        return live_refs(run.current)
    statemachine.transition(
        session, run, S.STOPPED, reason=end.reason, actor=actor, end_reason=end.end_reason
    )
    return []


def pause(
    rt: Runtime, user: users.Caller, ref: str, *, also: Callable[[Session, Run], None] | None = None
) -> ActionResult:
    """Pause a run: its training checkpoints and exits, its GPUs are released; resume continues.
    ``also`` writes what the caller records of the pause (a drain's list) in its transaction, so
    the pause and that record exist together or not at all."""

    def decide(session: Session, run: Run) -> tuple[str, list[str]]:
        if also is not None:
            also(session, run)
        if S(run.status) is S.QUEUED:
            statemachine.transition(
                session,
                run,
                S.PAUSED,
                reason="paused by user before it started",
                actor=user.name,
                end_reason=EndReason.PAUSED_BY_USER,
            )
            return f"run {run.id} paused (it had not started)", []
        reason = "pause requested by user: the training saves a checkpoint and exits"
        refs = begin_pause(session, run, reason=reason, actor=user.name)
        return f"run {run.id} is pausing (saving a checkpoint)", refs

    return _act(rt, user, ref, "pause", PAUSABLE, decide, rt.settings.pause_grace_s)


def begin_pause(session: Session, run: Run, *, reason: str, actor: str) -> list[str]:
    """Move an active run to ``pausing`` in the caller's transaction (``sf job pause``, a drain,
    a preemption); return the nodes to signal once it committed (SIGTERM: the training saves a
    checkpoint and exits)."""
    statemachine.transition(session, run, S.PAUSING, reason=reason, actor=actor)
    return live_refs(run.current)


def _start_point(rt: Runtime, run: Run) -> str:
    if run.current_attempt == 0:
        return "it starts from the beginning"
    out_dir = rt.storage.layout_of(run).out
    latest = checkpoints.latest(out_dir)
    if latest is None:
        return "no checkpoint yet: it starts from the beginning"
    return f"it continues from {latest.name} (step {latest.step})"


def _requeue(
    rt: Runtime, user: users.Caller, ref: str, action: str, allowed: frozenset[JobStatus]
) -> ActionResult:
    verb = {"resume": "resumed", "retry": "retried"}[action]

    def decide(session: Session, run: Run) -> tuple[str, list[str]]:
        start = _start_point(rt, run)
        run.auto_retries = 0
        reason = f"{verb} by user: attempt {run.current_attempt + 1}; {start}"
        statemachine.transition(session, run, S.QUEUED, reason=reason, actor=user.name)
        return f"run {run.id} {verb}: queued as attempt {run.current_attempt + 1}; {start}", []

    return _act(rt, user, ref, action, allowed, decide, 0.0)


def resume(rt: Runtime, user: users.Caller, ref: str) -> ActionResult:
    """Send a paused run back to the queue; it continues from its latest checkpoint."""
    return _requeue(rt, user, ref, "resume", RESUMABLE)


def retry(rt: Runtime, user: users.Caller, ref: str) -> ActionResult:
    """Requeue a failed or stopped run (same run id) from its latest checkpoint."""
    return _requeue(rt, user, ref, "retry", RETRYABLE)
