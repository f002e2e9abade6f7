"""Lineage: a run that starts from another run's artifact (``sf submit --init-from``).

The grammar is ``run/RUN_ID/KIND[@step=N]`` with KIND ``checkpoint`` (a training checkpoint of
the parent run: step N, or its latest) or ``export`` (the Hugging Face folder the parent's
export step wrote). :func:`parse_init_from` turns the flag into an :class:`InitFrom`, the field
a :class:`~starforge.contract.jobspec.JobSpec` carries. The client fills ``run_id``, ``kind`` and
``step``; admission resolves the artifact and fills ``path`` and ``resolved_step`` (whatever a
client sent there is written over), and the stored spec keeps them: the run records where it
started from. :func:`as_submitted` undoes that resolution, so an idempotent resubmission compares
equal to the stored spec.

:func:`check_compatible` is the one rule for which parent methods a child may start from: the
same framework for a checkpoint (its layout is the framework's own; outside TRL also the same
method), and for an export (a Hugging Face folder) any method that loads Hugging Face models.
Pure: no I/O; admission (server) does the lookups.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any

from pydantic import Field

from starforge.contract.base import Contract
from starforge.contract.errors import Rejected, UsageError

FLAG = "--init-from"
EXPORT_DIR = "export"  # under the parent's out dir: the HF folder its export step writes
_GRAMMAR = re.compile(
    r"run/(?P<run>r-[A-Za-z0-9_-]{1,30}|[A-Za-z0-9_-]{1,30})/(?P<kind>[a-z]+)"
    r"(?:@step=(?P<step>\d{1,9}))?"
)
# Frameworks whose methods load a Hugging Face model folder as their starting model.
LOADS_HF_FOLDER = frozenset({"trl", "verl", "nemo-rl", "custom"})


class ArtifactKind(StrEnum):
    CHECKPOINT = "checkpoint"  # a training checkpoint (checkpoint-N/, step-N, global_step_N/)
    EXPORT = "export"  # the parent's exported Hugging Face folder


class InitFrom(Contract):
    """Where a run starts from: the parent run's artifact, resolved by admission."""

    run_id: str = Field(min_length=1, max_length=32)
    kind: ArtifactKind
    step: int | None = Field(default=None, ge=0)  # asked for; None = the latest
    # Filled by admission (never trusted from a client):
    path: str = Field(default="", max_length=4096)  # the artifact on the shared storage
    resolved_step: int | None = Field(default=None, ge=0)  # the checkpoint's step
    parent_method: str = Field(default="", max_length=200)

    @property
    def ref(self) -> str:
        """The flag's spelling: ``run/r-abc/checkpoint@step=5``."""
        step = f"@step={self.step}" if self.step is not None else ""
        return f"run/{self.run_id}/{self.kind.value}{step}"

    def describe(self) -> str:
        """One line for ``sf job status``: the parent, the artifact and where it is."""
        step = self.resolved_step if self.resolved_step is not None else self.step
        at = f" step {step}" if step is not None else ""
        method = f" ({self.parent_method})" if self.parent_method else ""
        where = f" at {self.path}" if self.path else ""
        return f"{self.kind.value}{at} of run {self.run_id}{method}{where}"


def parse_init_from(text: str) -> InitFrom:
    """``run/RUN_ID/KIND[@step=N]`` → :class:`InitFrom`; a usage error names the grammar."""
    value = text.strip()
    match = _GRAMMAR.fullmatch(value)
    hint = f"write {FLAG} run/RUN_ID/checkpoint[@step=N] or {FLAG} run/RUN_ID/export"
    if match is None:
        raise UsageError(
            f"{FLAG} {text!r}: expected run/RUN_ID/KIND[@step=N]",
            hint=hint,
            details={"value": text},
        )
    kind = match["kind"]
    if kind not in {k.value for k in ArtifactKind}:
        raise UsageError(
            f"{FLAG} {text!r}: unknown artifact kind {kind!r} (checkpoint or export)",
            hint=hint,
            details={"value": text},
        )
    step = int(match["step"]) if match["step"] is not None else None
    if kind == ArtifactKind.EXPORT and step is not None:
        raise UsageError(
            f"{FLAG} {text!r}: an export has no step (@step= is for checkpoints)",
            hint=f"write {FLAG} run/{match['run']}/export, or .../checkpoint@step={step}",
            details={"value": text},
        )
    run_id = match["run"] if match["run"].startswith("r-") else "r-" + match["run"]
    return InitFrom(run_id=run_id, kind=ArtifactKind(kind), step=step)


def framework_of(method_id: str) -> str:
    return method_id.split("/", 1)[0]


def incompatibility(parent_method: str, child_method: str, kind: ArtifactKind) -> str | None:
    """Why a ``child_method`` run cannot start from a ``parent_method`` run's ``kind``, or None."""
    parent_fw, child_fw = framework_of(parent_method), framework_of(child_method)
    if kind is ArtifactKind.EXPORT:
        if child_fw not in LOADS_HF_FOLDER:
            return f"{child_method} does not load a Hugging Face folder"
        return None
    if parent_fw != child_fw:
        return (
            f"a {parent_fw} checkpoint ({parent_method}) cannot start a {child_fw} run "
            f"({child_method}): checkpoint layouts are the framework's own"
        )
    if parent_fw != "trl" and parent_method != child_method:
        return (
            f"a {parent_method} checkpoint cannot start a {child_method} run: outside TRL a "
            "checkpoint only resumes its own method"
        )
    return None


def check_compatible(parent_method: str, child_method: str, init: InitFrom) -> None:
    """Raise :class:`Rejected` naming the incompatibility (exit 2), or return."""
    why = incompatibility(parent_method, child_method, init.kind)
    if why is not None:
        raise Rejected(
            f"{FLAG} {init.ref}: {why}",
            hint=f"start from the run's export ({FLAG} run/{init.run_id}/export) or from a run "
            f"of the same framework",
            details={"init_from": init.ref, "parent_method": parent_method},
        )


def as_submitted(spec: dict[str, Any]) -> dict[str, Any]:
    """A stored spec (JSON) as sent: admission's resolution of ``init_from`` undone."""
    init = spec.get("init_from")
    if not isinstance(init, dict):
        return spec
    resolved = {"path": "", "resolved_step": None, "parent_method": ""}
    return {**spec, "init_from": {**init, **resolved}}
