"""Job statuses, why a run ended, and the table of allowed transitions.

The table is data: ``server/statemachine.py`` is the only writer of a status and it consults
:data:`TRANSITIONS` before every write; ``docs/states.md`` draws it and a test keeps the drawing
and the table equal. Terminal statuses are left only by ``retry`` (back to ``queued`` as a new
attempt of the same run). ``paused`` is not terminal: it holds no resources and is left by
``resume`` (back to ``queued``) or ``stop``.

Why a run ended (:class:`EndReason`) is kept apart from its status: ``failed`` says the run did not
finish, the end reason says whether the training crashed (``exit_nonzero``), the platform lost it
(``node_lost``) or it never started (``startup_failed``). Auto-retry policies choose by reason.

Each node of an attempt has its own small state machine (:class:`NodeState`, moved by a
:class:`NodeEvent` as :data:`NODE_TRANSITIONS` says); the run's status is derived from the nodes'
records when they all ended or one failed (``server/services/runs/lifecycle.decide``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal


class JobStatus(StrEnum):
    QUEUED = "queued"  # admitted; waiting for quota or capacity
    STARTING = "starting"  # placed; runners are unpacking and preparing the environment
    RUNNING = "running"  # the method's entrypoint is executing
    STOPPING = "stopping"  # a stop was accepted; processes are being terminated
    PAUSING = "pausing"  # a pause was accepted; training is checkpointing
    PAUSED = "paused"  # checkpoint kept, no resources held; resume re-queues it
    SUCCEEDED = "succeeded"  # the entrypoint exited 0
    FAILED = "failed"  # the entrypoint or the platform failed; see EndReason
    STOPPED = "stopped"  # stopped by its user or an admin

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL

    @property
    def is_active(self) -> bool:
        """Holds (or is about to hold) resources on an executor."""
        return self in ACTIVE


class EndReason(StrEnum):
    COMPLETED = "completed"  # every node's entrypoint exited 0
    EXIT_NONZERO = "exit_nonzero"  # the training itself failed (a bug, bad data, a crash)
    OOM = "oom"  # killed for memory
    NODE_LOST = "node_lost"  # a runner vanished or stopped beating without reporting an exit
    STOPPED_BY_USER = "stopped_by_user"  # `sf job stop`
    EARLY_STOPPED = "early_stopped"  # its sweep ruled it out at a rung (ASHA); since 0.2.0
    PAUSED_BY_USER = "paused_by_user"  # `sf job pause`: checkpointed and released its GPUs
    PREEMPTED = "preempted"  # the executor took the resources back
    STARTUP_FAILED = "startup_failed"  # the runner could not be started or could not prepare


# Values added to an answer's enum after the first release: the release that added each, and the
# value a client older than that is answered instead (docs/releases.md: a client is sent only
# values it can read; the server applies this, ``contract/answering.py``).
NEWER_VALUES: dict[EndReason, tuple[str, EndReason]] = {
    EndReason.EARLY_STOPPED: ("0.2.0", EndReason.STOPPED_BY_USER),
}

# What a runner may say of its node's end: not an end reason only the platform decides (a sweep's
# early stop), so a runner never claims one, and a runner's report reads on older servers too.
RunnerEndReason = Literal[
    EndReason.COMPLETED,
    EndReason.EXIT_NONZERO,
    EndReason.OOM,
    EndReason.NODE_LOST,
    EndReason.STOPPED_BY_USER,
    EndReason.PAUSED_BY_USER,
    EndReason.PREEMPTED,
    EndReason.STARTUP_FAILED,
]

S = JobStatus
TERMINAL: frozenset[JobStatus] = frozenset({S.SUCCEEDED, S.FAILED, S.STOPPED})
ACTIVE: frozenset[JobStatus] = frozenset({S.STARTING, S.RUNNING, S.STOPPING, S.PAUSING})
# What each user action may start from (anything else is answered rejected-with-reason).
STOPPABLE: frozenset[JobStatus] = frozenset({S.QUEUED, S.STARTING, S.RUNNING, S.PAUSING, S.PAUSED})
PAUSABLE: frozenset[JobStatus] = frozenset({S.QUEUED, S.STARTING, S.RUNNING})
RESUMABLE: frozenset[JobStatus] = frozenset({S.PAUSED})
RETRYABLE: frozenset[JobStatus] = frozenset({S.FAILED, S.STOPPED})

TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    # A queued run may be held (paused) before it ever starts, and resumed into the queue.
    S.QUEUED: frozenset({S.STARTING, S.PAUSED, S.STOPPED, S.FAILED}),
    S.STARTING: frozenset({S.RUNNING, S.SUCCEEDED, S.FAILED, S.STOPPING, S.PAUSING}),
    S.RUNNING: frozenset({S.SUCCEEDED, S.FAILED, S.STOPPING, S.PAUSING}),
    S.STOPPING: frozenset({S.STOPPED, S.SUCCEEDED, S.FAILED}),
    S.PAUSING: frozenset({S.PAUSED, S.SUCCEEDED, S.FAILED, S.STOPPING}),
    S.PAUSED: frozenset({S.QUEUED, S.STOPPED}),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset({S.QUEUED}),
    S.STOPPED: frozenset({S.QUEUED}),
}


def can_transition(src: JobStatus, dst: JobStatus) -> bool:
    return dst in TRANSITIONS[src]


# ---- node states: one record per node of an attempt --------------------------------------------


class NodeState(StrEnum):
    PENDING = "pending"  # placed; its runner is not started yet (or the start was not recorded)
    STARTED = "started"  # the executor started its runner; its reference is recorded
    STARTING = "starting"  # its runner unpacks the package and prepares the environment
    RUNNING = "running"  # the method's entrypoint executes on this node
    EXITED = "exited"  # it ended: an exit code is recorded, or it was lost (final)


class NodeEvent(StrEnum):
    # Reported by the node's runner (a lifecycle event, or its exit record).
    STARTING = "starting"  # the runner began preparing
    RUNNING = "running"  # the entrypoint started
    HEARTBEAT = "heartbeat"  # the runner is alive; changes no state
    EXITED = "exited"  # the entrypoint (or the runner) ended with an exit code
    # Decided by the platform.
    STARTED = "started"  # the executor started the runner; its reference is recorded
    ADOPTED = "adopted"  # a runner started by a server that died is found and recorded
    LOST = "lost"  # the runner vanished or fell silent without reporting an exit
    STARTUP_FAILED = "startup_failed"  # the executor could not start the runner


N, NE = NodeState, NodeEvent
# What each event does to a node in each state; an event missing from a row is rejected (a
# duplicate, a stale report, a node that already exited) and changes nothing. A node's runner
# may report before the platform records the start (the start and its record are not atomic),
# so `started` and `adopted` record the reference without moving a node that is already further.
NODE_TRANSITIONS: dict[NodeState, dict[NodeEvent, NodeState]] = {
    N.PENDING: {
        NE.STARTED: N.STARTED,
        NE.ADOPTED: N.STARTED,
        NE.STARTING: N.STARTING,
        NE.RUNNING: N.RUNNING,
        NE.HEARTBEAT: N.PENDING,
        NE.EXITED: N.EXITED,
        NE.LOST: N.EXITED,
        NE.STARTUP_FAILED: N.EXITED,
    },
    N.STARTED: {
        NE.STARTING: N.STARTING,
        NE.RUNNING: N.RUNNING,
        NE.HEARTBEAT: N.STARTED,
        NE.EXITED: N.EXITED,
        NE.LOST: N.EXITED,
    },
    N.STARTING: {
        NE.STARTED: N.STARTING,
        NE.ADOPTED: N.STARTING,
        NE.STARTING: N.STARTING,
        NE.RUNNING: N.RUNNING,
        NE.HEARTBEAT: N.STARTING,
        NE.EXITED: N.EXITED,
        NE.LOST: N.EXITED,
    },
    N.RUNNING: {
        NE.STARTED: N.RUNNING,
        NE.ADOPTED: N.RUNNING,
        NE.STARTING: N.RUNNING,  # a late `starting` never moves a node back
        NE.RUNNING: N.RUNNING,
        NE.HEARTBEAT: N.RUNNING,
        NE.EXITED: N.EXITED,
        NE.LOST: N.EXITED,
    },
    # Final: only the reference of a runner that ended before its start was recorded is kept.
    N.EXITED: {NE.STARTED: N.EXITED},
}


def next_node_state(state: NodeState, event: NodeEvent) -> NodeState | None:
    """The state ``event`` moves a node in ``state`` to, or None when the table rejects it."""
    return NODE_TRANSITIONS[state].get(event)
