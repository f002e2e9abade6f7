"""Compile one attempt into one Slurm batch script: a pure function, pinned by golden tests.

One attempt is one Slurm job. Each pool of the run is one component (several pools: a
heterogeneous job, components separated by ``#SBATCH hetjob``), asking for exactly the nodes
StarForge placed it on (``--nodelist``), so StarForge's accounting and Slurm's agree, one task per
node and the pool's GPUs per node as GRES. The script ``srun``s one runner per node; each task
picks its own binding file by ``SLURM_PROCID`` within its component (the component's binding
paths are the task's arguments, in rank order). An attempt of one node (one component, no Pyxis
container to enter) runs its runner in the batch shell itself, which already is on that node with
the job's GPUs, account and environment: no step is launched before the runner starts.

What the job's topology is comes from what Slurm allocated: the runner reads Slurm's
``CUDA_VISIBLE_DEVICES`` and the master address this script exports (the ``NodeAddr`` of the first
node of component 0, where rank 0 runs) — see ``starforge.runner.slurm``. The server names that
address when it knows it (``BatchJob.master_addr``, from the ``sinfo`` its scheduler pass read):
the script then asks ``scontrol`` nothing, two commands and two controller calls fewer before
the first runner starts; else the script looks it up.

A stop or pause signals the job's steps (``scancel --signal=TERM``: the runners, which
checkpoint), never the batch shell or ``srun`` (to ``srun`` TERM means "kill the step now"). The
batch shell gets TERM only ``signal_before_s`` before the time limit (``--signal=B:TERM@…``),
and hands it on to the steps the same way. A one-node attempt's runner is no step, so the script
starts, just after the runner, a relay step (:data:`_RELAY`) whose only task hands a TERM it gets
to the runner's process: a stop reaches that runner as it reaches any other, and the runner's
start does not wait for the step. Its batch shell hands a time limit's TERM to the runner
directly. A stop that lands before the relay step is up (a fraction of a second) is not lost:
the executor's cancel after the stop's grace still ends the job. ``--no-requeue``: after a node
failure StarForge retries by the method's policy, as a new attempt; Slurm must not start the same
attempt twice.

A member's attempt is submitted as the member's Unix account (:class:`Account`; a root server's
``sbatch --uid/--gid``): Slurm accounts it to the member, and the batch shell, ``srun`` and the
runners all run as that account.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Component:
    """One pool of the run: its partition, GRES type, GPUs per node, and the nodes chosen."""

    partition: str
    gres_type: str
    gpus_per_node: int
    nodes: list[str]
    bindings: list[str]  # one binding file per node, in rank order


@dataclass(frozen=True)
class BatchJob:
    job_name: str
    log_path: str  # node 0's log: the batch script's own output lands there too
    workdir: str  # the run's state dir
    components: list[Component]
    runner: list[str]  # the runner's command line (a binding path is appended)
    signal_before_s: int = 120
    time_limit: str = ""
    image: str = ""  # the run's image; used only with pyxis
    pyxis: bool = False
    mounts: list[str] = field(default_factory=list)  # host paths the container must see
    extra_args: list[str] = field(default_factory=list)
    master_addr: str = ""  # rank 0's node's NodeAddr, when the server knows it


@dataclass(frozen=True)
class Account:
    """The Unix account an attempt is submitted as (its member's), with its primary group."""

    name: str
    uid: int
    gid: int


def sbatch_argv(account: Account | None = None) -> list[str]:
    """The command that submits a compiled script (given on stdin); as ``account`` when given
    (only root may: Slurm refuses ``--uid`` from anyone else)."""
    argv = ["sbatch", "--parsable"]
    if account is not None:
        argv += [f"--uid={account.uid}", f"--gid={account.gid}"]
    return argv


def _header(job: BatchJob) -> list[str]:
    lines = [
        f"--job-name={job.job_name}",
        f"--output={job.log_path}",
        "--open-mode=append",
        f"--chdir={job.workdir}",
        "--no-requeue",
        f"--signal=B:TERM@{job.signal_before_s}",
    ]
    if job.time_limit:
        lines.append(f"--time={job.time_limit}")
    lines.extend(job.extra_args)
    return lines


def _component(c: Component) -> list[str]:
    lines = [
        f"--partition={c.partition}",
        f"--nodes={len(c.nodes)}",
        "--ntasks-per-node=1",
        f"--nodelist={','.join(c.nodes)}",
    ]
    if c.gpus_per_node:  # a step run on the CPU (an export) asks for no GPU at all
        lines.append(f"--gres=gpu:{c.gres_type}:{c.gpus_per_node}")
    return lines


def _srun(job: BatchJob, index: int, c: Component) -> str:
    flags = ["srun"]
    if len(job.components) > 1:
        flags.append(f"--het-group={index}")
    flags += [f"--nodes={len(c.nodes)}", "--ntasks-per-node=1", "--kill-on-bad-exit=0"]
    if job.pyxis and job.image:
        flags += [f"--container-image={job.image}", f"--container-workdir={job.workdir}"]
        if job.mounts:
            flags.append("--container-mounts=" + ",".join(f"{m}:{m}" for m in job.mounts))
    # Each task runs the runner of its own node: the binding at its SLURM_PROCID.
    pick = 'b=("$@"); exec ' + shlex.join(job.runner) + ' "${b[$SLURM_PROCID]}"'
    argv = [*flags, "bash", "-c", pick, "starforge-runner", *c.bindings]
    return shlex.join(argv) + " &"


def _direct(job: BatchJob) -> bool:
    """Whether the runner runs in the batch shell: one node, and no container to start it in."""
    [only, *others] = job.components
    return not others and len(only.nodes) == 1 and not (job.pyxis and job.image)


_RELAY_TASK = 'trap "kill -TERM $1; exit 0" TERM; while kill -0 $1; do sleep 5 & wait $!; done'
# The relay step of a one-node attempt: its task hands the TERM of a stop or pause (``scancel
# --signal=TERM`` reaches steps only) to the runner, whose pid is its argument, and ends with it.
# Its own output (srun's and slurmstepd's words when the script ends it) is not the run's log.
_RELAY = (
    shlex.join(["srun", "--nodes=1", "--ntasks=1", "--quiet", "bash", "-c", _RELAY_TASK])
    + ' starforge-relay "$runner" >/dev/null 2>&1 &\nrelay=$!\n'
)


def _runner_here(job: BatchJob, c: Component) -> str:
    """The one runner of a one-node attempt, started in the batch shell, then its relay step."""
    start = shlex.join([*job.runner, c.bindings[0]]) + ' &\nrunner=$!\npids+=("$runner")\n'
    # TERM before the time limit: to the runner itself (it is no step the scancel could reach).
    return start + "trap 'kill -TERM \"$runner\"' TERM\n" + _RELAY


_LOOKUP_MASTER = """\
set -u
# Rank 0 runs on the first node of component 0: its address is the job's master address.
nodelist="${SLURM_JOB_NODELIST_HET_GROUP_0:-$SLURM_JOB_NODELIST}"
first=$(scontrol show hostnames "$nodelist" | head -n 1)
addr=$(scontrol show node "$first" | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p')
export STARFORGE_SLURM_MASTER_ADDR="${addr:-$first}"
"""

_GIVEN_MASTER = """\
set -u
# Rank 0 runs on the first node of component 0: its address is the job's master address.
export STARFORGE_SLURM_MASTER_ADDR={addr}
"""

_PROLOGUE = """\
export STARFORGE_SLURM_JOB_ID="$SLURM_JOB_ID"
pids=()
"""
_STEP_TRAP = """\
# TERM before the time limit reaches this shell only: hand it to the runners (the job's steps).
# Never to srun itself: srun treats TERM as "kill the step now", and the runners must checkpoint.
trap 'scancel --signal=TERM "$SLURM_JOB_ID"' TERM
"""

_EPILOGUE = """\
status=0
for pid in "${pids[@]}"; do
  while true; do
    wait "$pid"
    rc=$?
    kill -0 "$pid" 2>/dev/null || break  # wait returned for a trap: wait again
  done
  if [ "$rc" -ne 0 ]; then status=$rc; fi
done
"""
_END_RELAY = """\
kill "$relay" 2>/dev/null  # the runner is gone: its relay step has nothing left to hand on
"""


def compile_batch(job: BatchJob) -> str:
    """The batch script of one attempt (``#SBATCH`` options, then one ``srun`` per component,
    or the one runner of a one-node attempt started in the batch shell and its relay step)."""
    if not job.components:
        raise ValueError("a Slurm job needs at least one component")
    lines = ["#!/bin/bash"]
    lines += [f"#SBATCH {opt}" for opt in _header(job)]
    for index, c in enumerate(job.components):
        if len(c.nodes) != len(c.bindings):
            raise ValueError(f"component {index}: {len(c.nodes)} nodes, {len(c.bindings)} bindings")
        if index:
            lines.append("#SBATCH hetjob")
        lines += [f"#SBATCH {opt}" for opt in _component(c)]
    lines.append(f"# StarForge {job.job_name}: one runner per node")
    master = _GIVEN_MASTER.format(addr=shlex.quote(job.master_addr)) if job.master_addr else ""
    body = [master or _LOOKUP_MASTER, _PROLOGUE]
    if _direct(job):
        body += [_runner_here(job, job.components[0]), _EPILOGUE, _END_RELAY]
    else:
        body.append(_STEP_TRAP)
        for index, c in enumerate(job.components):
            body.append(_srun(job, index, c) + '\npids+=("$!")\n')
        body.append(_EPILOGUE)
    body.append('exit "$status"\n')
    return "\n".join(lines) + "\n" + "".join(body)
