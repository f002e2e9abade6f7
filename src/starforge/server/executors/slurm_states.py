"""Slurm's job states read back: parsing ``squeue --json`` and mapping states onto StarForge's.

:func:`parse_jobs` reads the jobs of one ``squeue --json`` answer (Slurm 22.05 spells a state as
a string, 23.02 and later as a list of strings; both are read). :func:`ending` is the pure
mapping, table-tested, from how a Slurm job ended to how StarForge records the end of a node
whose runner did not write an exit record itself (it was killed with its job):

============= ====================== =========================================================
Slurm state    StarForge              why
============= ====================== =========================================================
COMPLETED      exited, Slurm's code   the runner ended; its own exit record says more
FAILED         exited, Slurm's code   ``exit_nonzero`` (code 1 when Slurm reports 0)
CANCELLED      exited, 128+signal     no reason: the run's status (stopping/pausing) decides
TIMEOUT        exited, 128+SIGTERM    ``exit_nonzero``: the time limit ended it
OUT_OF_MEMORY  exited, 137            ``oom``
PREEMPTED      exited, 143            ``preempted``
NODE_FAIL      lost                   ``node_lost``: auto-retried by the method's policy
BOOT_FAIL      lost                   ``node_lost``
DEADLINE       exited, 143            ``exit_nonzero``
============= ====================== =========================================================
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Any

from starforge.contract.states import EndReason

# States in which a job holds (or waits for) its allocation: its runners are alive.
LIVE = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
    }
)
SIGTERM_CODE = 128 + int(signal.SIGTERM)
SIGKILL_CODE = 128 + int(signal.SIGKILL)


@dataclass(frozen=True)
class SlurmJob:
    job_id: int
    name: str
    state: str  # the base state, e.g. RUNNING
    reason: str  # Slurm's state reason (why a PENDING job waits), "None" when none
    exit_code: int | None  # the batch script's exit status, when Slurm reported one
    signal: int | None  # the signal that ended it, when one did
    nodes: str = ""

    @property
    def alive(self) -> bool:
        return self.state in LIVE

    @property
    def pending_reason(self) -> str | None:
        """Why Slurm has not started it yet (``Resources``, ``Priority``…), or None."""
        if self.state != "PENDING":
            return None
        return self.reason if self.reason and self.reason != "None" else "waiting in Slurm"


@dataclass(frozen=True)
class Ending:
    """How a node ends when its job ended without the runner's own exit record."""

    lost: bool  # the node is lost (no exit code); else it exited with exit_code
    exit_code: int | None
    end_reason: EndReason | None


def _state(raw: Any) -> str:
    if isinstance(raw, list):  # 23.02+: ["RUNNING", "COMPLETING"]: the first is the base state
        raw = raw[0] if raw else ""
    return str(raw or "").upper()


def _exit(job: dict[str, Any]) -> tuple[int | None, int | None]:
    """(exit code, signal) from 22.05's int or the structured form of later versions."""
    raw = job.get("exit_code")
    if isinstance(raw, int):  # 22.05: the raw wait status (``ExitCode=1:0`` is 256)
        return raw >> 8, (raw & 0x7F) or None
    if isinstance(raw, dict):
        rc = raw.get("return_code")
        sig = (raw.get("signal") or {}).get("id")
        rc = rc.get("number") if isinstance(rc, dict) else rc
        sig = sig.get("number") if isinstance(sig, dict) else sig
        return (rc if isinstance(rc, int) else None), (
            sig if isinstance(sig, int) and sig else None
        )
    return None, None


def parse_jobs(payload: dict[str, Any]) -> dict[int, SlurmJob]:
    """The jobs of one ``squeue --json`` (or ``scontrol show job --json``) answer, by id."""
    jobs: dict[int, SlurmJob] = {}
    for raw in payload.get("jobs") or []:
        job_id = raw.get("job_id")
        if not isinstance(job_id, int):
            continue
        code, sig = _exit(raw)
        jobs[job_id] = SlurmJob(
            job_id=job_id,
            name=str(raw.get("name") or ""),
            state=_state(raw.get("job_state")),
            reason=str(raw.get("state_reason") or ""),
            exit_code=code,
            signal=sig,
            nodes=str(raw.get("nodes") or ""),
        )
    return jobs


def ending(state: str, exit_code: int | None, sig: int | None = None) -> Ending:
    """What a node whose job ended in ``state`` records, when its runner recorded nothing."""
    by_signal = 128 + sig if sig else None
    if state in ("NODE_FAIL", "BOOT_FAIL"):
        return Ending(True, None, EndReason.NODE_LOST)
    if state == "OUT_OF_MEMORY":
        return Ending(False, SIGKILL_CODE, EndReason.OOM)
    if state == "PREEMPTED":
        return Ending(False, by_signal or SIGTERM_CODE, EndReason.PREEMPTED)
    if state == "CANCELLED":
        return Ending(False, by_signal or SIGTERM_CODE, None)
    if state in ("TIMEOUT", "DEADLINE"):
        return Ending(False, by_signal or SIGTERM_CODE, EndReason.EXIT_NONZERO)
    if state == "COMPLETED":
        code = exit_code or 0
        return Ending(False, code, EndReason.COMPLETED if code == 0 else EndReason.EXIT_NONZERO)
    # FAILED and anything this server does not know: the job failed.
    code = by_signal or exit_code or 1
    return Ending(False, code, EndReason.EXIT_NONZERO)
