"""A runner started by Slurm: the topology Slurm allocated wins over the one the server guessed.

The server chose the nodes (Slurm got them as ``--nodelist``), but the GPU indices on each node
and the address of rank 0 are Slurm's: ``CUDA_VISIBLE_DEVICES`` as Slurm set it for this task and
the master address the batch script exported. The runner's record carries the Slurm job id, so a
server that never recorded the start adopts the job instead of submitting it again.

A runner that Slurm terminates asks Slurm why (:func:`why_terminated`): a node that failed or
went down, or a preemption, ends the node as ``node_lost`` / ``preempted`` (auto-retried by the
method's policy) rather than as a training that exited non-zero.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from starforge.contract.states import EndReason

if TYPE_CHECKING:  # a quick start (runner/quick.py) uses this module before it imports pydantic
    from starforge.contract.env import Binding

JOB_ID = "STARFORGE_SLURM_JOB_ID"
MASTER_ADDR = "STARFORGE_SLURM_MASTER_ADDR"


def under_slurm(environ: Mapping[str, str]) -> bool:
    return bool(environ.get(JOB_ID))


def devices(raw: str) -> list[int] | None:
    """The GPU indices of a ``CUDA_VISIBLE_DEVICES`` value (None: not a list of indices)."""
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    return [int(p) for p in parts] if parts and all(p.isdigit() for p in parts) else None


def apply(binding: Binding, environ: Mapping[str, str]) -> Binding:
    """The binding with Slurm's allocation in place of the server's (unchanged outside Slurm)."""
    if not under_slurm(environ):
        return binding
    update: dict[str, object] = {}
    allocated = devices(environ.get("CUDA_VISIBLE_DEVICES", ""))
    if allocated is not None:
        update["visible_devices"] = allocated
    if environ.get(MASTER_ADDR):
        update["master_addr"] = environ[MASTER_ADDR]
    return binding.model_copy(update=update)


class Ranked(Protocol):
    @property
    def node_rank(self) -> int: ...


def record_fields(binding: Ranked, environ: Mapping[str, str]) -> dict[str, object]:
    """What the runner record adds under Slurm: the job to adopt, and this node's rank."""
    job = environ.get(JOB_ID, "")
    if not job.isdigit():
        return {}
    return {"slurm_job_id": int(job), "node_rank": binding.node_rank}


# Slurm job states that say the platform, not the training, ended the job.
PLATFORM_ENDS = {
    "NODE_FAIL": EndReason.NODE_LOST,
    "BOOT_FAIL": EndReason.NODE_LOST,
    "PREEMPTED": EndReason.PREEMPTED,
}


def job_state(oneliner: str) -> str:
    """``JobState`` from ``scontrol show job --oneliner`` output ("" when absent)."""
    for word in oneliner.split():
        if word.startswith("JobState="):
            return word.removeprefix("JobState=")
    return ""


def why_terminated(environ: Mapping[str, str]) -> EndReason | None:
    """The platform's reason for terminating this runner's job, if Slurm names one."""
    job = environ.get(JOB_ID, "")
    if not job.isdigit():
        return None
    try:
        out = subprocess.run(
            ["scontrol", "show", "job", "--oneliner", job],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return PLATFORM_ENDS.get(job_state(out))
