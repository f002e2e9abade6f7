"""Job statuses, why a run ended, and the table of allowed transitions.

The table is data: ``server/statemachine.py`` is the only writer of a status and it consults
:data:`TRANSITIONS` before every write; ``docs/states.md`` draws it and a test keeps the drawing
and the table equal. Terminal statuses are left only by ``retry`` (back to ``queued`` as a new
attempt of the same run). ``paused`` is not terminal: it holds no resources and is left by
``resume`` (back to ``queued``) or ``stop``.

Why a run ended (:class:`EndReason`) is kept apart from its status: ``failed`` says the run did not
finish, the end reason says whether the training crashed (``exit_nonzero``), the platform lost it
(``node_lost``) or it never started (``startup_failed``). Auto-retry policies choose by reason.
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
    COMPLETED = "completed"  # every node's entrypoint exited 0
    EXIT_NONZERO = "exit_nonzero"  # the training itself failed (a bug, bad data, a crash)
    OOM = "oom"  # killed for memory
    NODE_LOST = "node_lost"  # a runner vanished or stopped beating without reporting an exit
    STOPPED_BY_USER = "stopped_by_user"  # `sf job stop`
    PAUSED_BY_USER = "paused_by_user"  # `sf job pause`: checkpointed and released its GPUs
    PREEMPTED = "preempted"  # the executor took the resources back
    STARTUP_FAILED = "startup_failed"  # the runner could not be started or could not prepare


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
