"""Job statuses, why a run ended, and the table of allowed transitions.

The table is data: ``server/statemachine.py`` is the only writer of a status and it consults
:data:`TRANSITIONS` before every write. Terminal statuses are left only by ``retry`` (back to
``queued`` as a new attempt).
"""

from __future__ import annotations

from enum import StrEnum


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
    COMPLETED = "completed"
    EXIT_NONZERO = "exit_nonzero"
    OOM = "oom"
    NODE_LOST = "node_lost"
    STOPPED_BY_USER = "stopped_by_user"
    PAUSED_BY_USER = "paused_by_user"
    PREEMPTED = "preempted"
    STARTUP_FAILED = "startup_failed"


S = JobStatus
TERMINAL: frozenset[JobStatus] = frozenset({S.SUCCEEDED, S.FAILED, S.STOPPED})
ACTIVE: frozenset[JobStatus] = frozenset({S.STARTING, S.RUNNING, S.STOPPING, S.PAUSING})

TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    S.QUEUED: frozenset({S.STARTING, S.STOPPED, S.FAILED}),
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
