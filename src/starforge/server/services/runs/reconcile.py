"""The reconciler's decisions: what happened to runners that did not say so themselves.

Each tick looks at every node of every unfinished current attempt and gathers facts about it
(its record, whether the executor sees its process, the exit record and runner record it left in
the run dir, its latest heartbeat); :func:`judge_node`, a pure function, turns those facts into a
:class:`Verdict`; the verdicts are written in one transaction and acted on after it commits.

- An exit record (written by the runner before its final report) finalises the node with the
  recorded code, whether or not the report ever arrived: a server that was down misses nothing.
  A live runner gets ``REPORT_GRACE_S`` after writing it to deliver its own reports (in order,
  so a short run keeps its ``running`` event).
- A node without an executor reference (the server died between committing a placement and
  recording the start) is adopted when its runner left a runner record naming a live process,
  else it never started (``startup_failed``). Either way no second runner is started for it.
- A node whose process is gone without an exit record is lost; so is a live one that has not
  beaten for ``lost_after_s``, counted from this server's start at the earliest so a restart
  never condemns runners that could not reach it. A runner that never beat (an older runner)
  is judged by its process alone. Lost nodes' process groups are killed.
- A stop or pause whose grace period ran out long ago (the server that would have sent SIGKILL
  died) is forced again.

Safe to kill at any line and rerun: it acts only on what the database and the run dir say.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from starforge.contract.errors import StarForgeError
from starforge.contract.layout import RunLayout
from starforge.contract.nodes import NodeRecord
from starforge.contract.states import EndReason, JobStatus, NodeEvent, NodeState
from starforge.server import statemachine
from starforge.server.db.models import Attempt, Run, utcnow
from starforge.server.executors.base import SupportsAdopt, SupportsReap
from starforge.server.runtime import Runtime
from starforge.server.services.runs import lifecycle
from starforge.server.services.scheduling import dispatch

log = logging.getLogger(__name__)


class Act(StrEnum):
    LEAVE = "leave"  # nothing to do
    EXIT = "exit"  # finalise from the exit record
    LOST = "lost"  # the node is lost
    ADOPT = "adopt"  # record the reference of a runner started by a server that died
    FORCE = "force"  # SIGKILL a node that outlived an old stop or pause


@dataclass(frozen=True)
class NodeFacts:
    state: NodeState  # the node's recorded state
    ref: str | None
    alive: bool | None  # the executor's view of ref; None = it could not tell
    exit_record: dict[str, Any] | None
    adoptable: str | None  # the reference of a live runner named by its runner record
    beat: float | None  # epoch seconds of its latest heartbeat (None: it never beat)


REPORT_GRACE_S = 5.0  # how long a live runner's own reports win over its exit record


@dataclass(frozen=True)
class Clock:
    now: float  # epoch seconds
    since: float  # this server's start: silence before it does not count
    lost_after_s: float
    overdue: bool = False  # the run has been stopping/pausing for longer than any grace


@dataclass(frozen=True)
class Verdict:
    act: Act
    exit_code: int | None = None
    end_reason: EndReason | None = None
    why: str = ""
    ref: str | None = None


def judge_node(f: NodeFacts, clock: Clock) -> Verdict:
    """What to do about one node, from facts alone (no I/O: property-tested)."""
    if f.state is NodeState.EXITED:
        return Verdict(Act.LEAVE)
    if f.exit_record is not None:
        written = f.exit_record.get("at")
        fresh = isinstance(written, int | float) and clock.now - written < REPORT_GRACE_S
        if f.alive is True and fresh:
            # A live runner is delivering its own reports (in order: `running`, then `exited`).
            return Verdict(Act.LEAVE)
        why = str(f.exit_record.get("message") or "")  # a startup failure's cause
        return Verdict(Act.EXIT, int(f.exit_record["exit_code"]), _end_reason(f.exit_record), why)
    if f.ref is None:
        if f.adoptable is not None:
            return Verdict(Act.ADOPT, ref=f.adoptable)
        why = "its runner was never started (the server stopped while starting it)"
        return Verdict(Act.LOST, end_reason=EndReason.STARTUP_FAILED, why=why)
    if f.alive is None:
        return Verdict(Act.LEAVE)
    if not f.alive:
        return Verdict(Act.LOST, why="its runner ended without reporting an exit")
    if f.beat is not None:
        silent = clock.now - max(f.beat, clock.since)
        if silent > clock.lost_after_s:
            return Verdict(Act.LOST, why=f"no heartbeat for {silent:.0f} s")
    if clock.overdue:
        return Verdict(Act.FORCE)
    return Verdict(Act.LEAVE)


def _end_reason(record: dict[str, Any]) -> EndReason | None:
    """The end reason an exit record names; one this server does not know counts as none."""
    try:
        return EndReason(str(record["end_reason"])) if record.get("end_reason") else None
    except ValueError:
        return None


# ---- gathering facts ---------------------------------------------------------------------------


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def runner_record_path(run_dir: Path, attempt: int, rank: int) -> Path:
    return RunLayout(run_dir).runner_record(attempt, rank)


def _facts(rt: Runtime, run_dir: Path, number: int, rank: int, node: NodeRecord) -> NodeFacts:
    if node.exited:
        return NodeFacts(node.state, node.ref, None, None, None, None)
    alive: bool | None = None
    adoptable: str | None = None
    if node.ref is not None:
        try:
            alive = rt.executor.is_alive(node.ref)
        except StarForgeError:
            log.exception("cannot check %s", node.ref)
    elif isinstance(rt.executor, SupportsAdopt):
        record = _read_json(runner_record_path(run_dir, number, rank))
        if record is not None:
            adoptable = rt.executor.adopt(record)
    record_path = rt.storage.exit_record_path(run_dir, number, rank)
    return NodeFacts(
        state=node.state,
        ref=node.ref,
        alive=alive,
        exit_record=rt.storage.read_exit_record(record_path),
        adoptable=adoptable,
        beat=node.beat,
    )


def _overdue(rt: Runtime, run: Run, now: datetime) -> bool:
    status = JobStatus(run.status)
    if status not in (JobStatus.STOPPING, JobStatus.PAUSING):
        return False
    s = rt.settings
    grace = s.pause_grace_s if status is JobStatus.PAUSING else s.stop_grace_s
    return (now - run.updated_at).total_seconds() > grace + s.lost_after_s


# ---- applying verdicts -------------------------------------------------------------------------


def reconcile_attempt(
    rt: Runtime, session: Session, run: Run, attempt: Attempt
) -> lifecycle.Outcome | None:
    """Judge every node of one attempt and record the verdicts in the caller's transaction."""
    now = utcnow()
    clock = Clock(
        now=now.timestamp(),
        since=rt.started_at.timestamp(),
        lost_after_s=rt.settings.lost_after_s,
        overdue=_overdue(rt, run, now),
    )
    run_dir = dispatch.run_dir_of(rt, run)
    changed, kill, force = False, [], []
    for rank, node in attempt.node_records().items():
        verdict = judge_node(_facts(rt, run_dir, attempt.number, rank, node), clock)
        if verdict.act is Act.LEAVE:
            continue
        if verdict.act is Act.FORCE:
            force.append(str(node.ref))
            continue
        changed |= _record(attempt, rank, verdict) is not None
        if verdict.act is Act.ADOPT:
            log.info(
                "run %s attempt %s node %s adopted as %s", run.id, attempt.number, rank, verdict.ref
            )
        elif verdict.act is Act.LOST and node.ref:
            kill.append(node.ref)
    if not changed:
        return lifecycle.Outcome(True, "forced", kill_refs=force) if force else None
    outcome = lifecycle.finish_attempt(session, run, attempt, "reconciler", rt=rt)
    if outcome is None:
        return lifecycle.Outcome(True, "nodes updated", kill_refs=kill + force)
    outcome.kill_refs = sorted({*outcome.kill_refs, *kill, *force})
    return outcome


def _record(attempt: Attempt, rank: int, verdict: Verdict) -> NodeRecord | None:
    """Write one verdict on a node through the state machine (None: the table rejected it)."""
    event = {Act.ADOPT: NodeEvent.ADOPTED, Act.EXIT: NodeEvent.EXITED, Act.LOST: NodeEvent.LOST}
    return statemachine.node_event(
        attempt,
        rank,
        event[verdict.act],
        ref=verdict.ref,
        exit_code=verdict.exit_code,
        end_reason=verdict.end_reason,
        why=verdict.why,
    )


def reconcile(rt: Runtime) -> None:
    """One pass over every unfinished current attempt; acts only after the commit."""
    outcomes = []
    with rt.transaction() as session:
        for run, attempt in dispatch.active_attempts(session, lock=True):
            outcome = reconcile_attempt(rt, session, run, attempt)
            if outcome is not None:
                outcomes.append(outcome)
    for outcome in outcomes:
        lifecycle.act_on(rt, outcome)
    if isinstance(rt.executor, SupportsReap):
        rt.executor.reap()
