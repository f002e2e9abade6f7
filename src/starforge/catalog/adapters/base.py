"""What every adapter shares: the compile context, the launch plan, platform-owned config keys."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starforge.catalog.loader import Method
from starforge.contract import params
from starforge.contract.config import compose, set_path
from starforge.contract.env import Binding, input_location, model_location
from starforge.contract.jobspec import JobSpec
from starforge.contract.layout import RunLayout


@dataclass(frozen=True)
class CompileContext:
    spec: JobSpec
    method: Method
    binding: Binding
    env: dict[str, str]  # the job environment (contract.env.job_env) the plan starts from
    config: dict[str, Any]  # the experiment's composed config with the run's parameters applied

    @property
    def work_dir(self) -> str:
        return self.binding.work_dir

    @property
    def exp_dir(self) -> str:
        return f"{self.binding.work_dir}/{self.spec.exp_dir}"

    @property
    def state_dir(self) -> str:
        return str(RunLayout(Path(self.binding.run_dir)).state)


@dataclass(frozen=True)
class LaunchPlan:
    argv: list[str]
    cwd: str
    env: dict[str, str]
    files: dict[str, str] = field(default_factory=dict)  # path -> content, written before launch
    launcher: str = ""  # "torchrun": the runner passes SIGTERM to its ranks (runner/ranks.py)

    def describe(self) -> dict[str, Any]:
        """What `--dry-run` prints: the command, where it runs, what the platform added."""
        return {"argv": self.argv, "cwd": self.cwd, "files": sorted(self.files)}


# torchrun under a shell that ignores SIGTERM: the runner hands SIGTERM to the ranks itself
# (runner/ranks.py); torchrun's own handling would abort their checkpoint after 30 s or at a
# second signal. The ignored SIGTERM stays ignored across exec, and torchrun leaves it so when
# it is not among the signals it handles.
_IGNORE_TERM = ["sh", "-c", 'trap "" TERM; exec "$@"', "torchrun"]
TORCHRUN_SIGNALS = "SIGINT,SIGHUP,SIGQUIT"


def torchrun_argv(b: Binding, launcher: list[str], *program: str) -> list[str]:
    """``torchrun`` (``launcher``: its command) of ``program`` on this node: the binding's node
    count and rank, its processes per node and rank 0's address, static rendezvous (every node
    is started at once, by the executor, so there is nothing elastic to wait for)."""
    rendezvous = {
        "nnodes": b.nnodes,
        "node_rank": b.node_rank,
        "nproc_per_node": b.procs_per_node,
        "master_addr": b.master_addr,
        "master_port": b.master_port,
        "signals_to_handle": TORCHRUN_SIGNALS,
    }
    flags = [f"--{key}={value}" for key, value in rendezvous.items()]
    return [*_IGNORE_TERM, *launcher, *flags, *program]


def run_config(spec: JobSpec, method: Method, read: Callable[[str], str | None]) -> dict[str, Any]:
    """The experiment's config composed from its files, with the run's parameters applied.

    ``read(lab_relative_path) -> str | None`` reads the package (laptop, server or job)."""
    path = f"{spec.exp_dir}/{method.config.file}"
    composed = compose(path, read, missing_ok=True)
    return params.apply(method.params, composed, spec.hyperparams)


def platform_config(ctx: CompileContext, out_subdir: str = "checkpoints") -> dict[str, Any]:
    """The run's config with the keys the platform owns written over it."""
    config = params.apply({}, ctx.config, {})  # a deep copy
    decl = ctx.method.config
    if decl.output_dir:
        set_path(config, decl.output_dir, f"{ctx.binding.out_dir}/{out_subdir}")
    topology = {"nodes": ctx.binding.nnodes, "gpus_per_node": ctx.binding.gpus_per_node}
    for key, path in decl.topology.items():
        set_path(config, path, topology[key])
    for key, path in decl.bindings.items():
        location = input_location(getattr(ctx.spec.inputs, key), ctx.binding.work_dir)
        if key == "model":  # an --init-from artifact replaces --model
            location = model_location(ctx.spec, ctx.binding.work_dir)
        if location:
            set_path(config, path, location)
    return config
