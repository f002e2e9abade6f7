"""The method declaration format (``method.yaml``), documented in ``docs/methods.md``.

A method says who it is (id, version), what it runs (runtimes, entrypoint), how parameters reach
the framework (``config.mode``), what a submission must give (``requires``), what it can do after
training (``lifecycle``; ``actions``: what each ``--then`` step needs), how it is observed, and
its **typed parameters**: each with a type, the dot-path it binds in the experiment's config, a
default, bounds or choices, and a doc line.
Everything here is data, built strictly (an unknown key in a ``method.yaml`` is an error);
behaviour lives in ``contract/params.py`` (values), ``catalog/checks`` (framework rules) and
``catalog/adapters`` (launch plans).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, model_validator

from starforge.contract.base import Contract
from starforge.contract.params import Param
from starforge.contract.steps import ActionNeeds, StepAction


class RuntimeVersion(Contract):
    """One framework version a method can run with."""

    runtime_id: str
    image: str = ""  # the default image for this version (an OCI reference)
    packages: list[str] = Field(default_factory=list)  # exact pins, e.g. trl==1.16.0
    status: Literal["supported", "deprecated"] = "supported"


class Runtime(Contract):
    default: str
    versions: dict[str, RuntimeVersion]

    @model_validator(mode="after")
    def _default_exists(self) -> Runtime:
        if self.default not in self.versions:
            raise ValueError(f"runtime.default {self.default!r} is not in runtime.versions")
        return self


class EntrypointKind(StrEnum):
    PYTHON = "python"  # run an experiment file with the job's Python
    BASH = "bash"  # run an experiment shell script
    MODULE = "module"  # run a framework module (python -m ...), e.g. verl.trainer.main_ppo
    FILE = "file"  # run a script shipped with the framework (relative to its install)


class Entrypoint(Contract):
    kind: EntrypointKind
    file: str = ""  # for python/bash (experiment-relative) and file (framework-relative)
    module: str = ""  # for module
    launcher: Literal["python", "torchrun", "uv"] = "python"


class ConfigMode(StrEnum):
    TRAINER_ARGS = "trainer-args"  # the resolved config is handed to the script as a file
    HYDRA = "hydra-overrides"  # key=value overrides on the command line (verl)
    DOT = "dot-overrides"  # a YAML config file plus key=value overrides (NeMo-RL)
    NONE = "none"  # the entrypoint reads what it needs itself (custom)


class ConfigSpec(Contract):
    file: str = "config.yaml"  # the experiment's config file
    mode: ConfigMode = ConfigMode.TRAINER_ARGS
    # Keys the platform owns (outputs, topology): an experiment config that sets one is refused.
    reserved: list[str] = Field(default_factory=list)
    # Where --model / --train-data / --validation-data land in the framework config.
    bindings: dict[Literal["model", "train_data", "validation_data"], str] = Field(
        default_factory=dict
    )
    # Where the platform writes the topology it decided (overriding the uploaded config).
    topology: dict[Literal["nodes", "gpus_per_node"], str] = Field(default_factory=dict)
    # Where the platform writes the output directory.
    output_dir: str = ""


class Metrics(Contract):
    primary: list[str] = Field(default_factory=list)


class AutoRetry(Contract):
    """How a run of this method is requeued, from its latest checkpoint, after the platform
    failed it (never after the training itself failed: that is the user's ``sf job retry``)."""

    limit: int = Field(default=2, ge=0, le=100)  # requeues in a row; `sf submit --max-retries`
    on: list[Literal["node_lost", "preempted"]] = Field(
        default_factory=lambda: ["node_lost", "preempted"]
    )
    # Only resume: a run lost before its first checkpoint fails (it is more often a setup
    # problem than bad luck, and restarting from nothing is the user's call).
    require_checkpoint: bool = True


class MethodDecl(Contract):
    """One ``method.yaml`` as written."""

    id: str
    version: str
    framework: str
    summary: str
    category: Literal["rl", "sft", "preference", "custom"] = "custom"
    roles: list[str] = Field(default_factory=lambda: ["trainer"])
    runtime: Runtime
    entrypoint: Entrypoint
    config: ConfigSpec = Field(default_factory=ConfigSpec)
    requires: list[Literal["model", "train_data", "validation_data", "image"]] = Field(
        default_factory=list
    )
    observability: Literal["platform", "external"] = "platform"
    lifecycle: list[Literal["export", "eval"]] = Field(default_factory=list)
    metrics: Metrics = Field(default_factory=Metrics)
    checks: list[str] = Field(default_factory=list)  # framework static checks, by name
    auto_retry: AutoRetry = Field(default_factory=AutoRetry)
    params: dict[str, Param] = Field(default_factory=dict)
    # The steps ``--then ACTION`` may add, with what each needs (GPUs, actions before it).
    actions: dict[StepAction, ActionNeeds] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> MethodDecl:
        fw, _, name = self.id.partition("/")
        if fw != self.framework or not name:
            raise ValueError(f"id {self.id!r} must be '{self.framework}/<method>'")
        return self
