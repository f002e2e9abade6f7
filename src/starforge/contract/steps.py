"""Steps of a run: the platform programs (``export``, ``eval``) that run after training succeeds.

``sf submit EXP --then export --then eval`` records the pipeline in the JobSpec (``steps``). When
the training run succeeds, the control plane creates the first step as a new run (a *step run*)
in the same transaction that records the success; each step run that succeeds creates the next.
A step run is an ordinary run (queue, quotas, attempts, logs, stop, pause, retry) whose JobSpec
carries a :class:`StepSpec`: the runner then starts the step's platform program instead of the
experiment's entrypoint. Retrying a failed step retries only that step run; training is never
run again.

:func:`check_steps` is the one check of a pipeline against its method's declared actions; the
CLI runs it before packing and admission runs it again (exit 2, nothing created).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import Field

from starforge.contract.base import Contract
from starforge.contract.errors import Rejected

StepAction = Literal["export", "eval"]
ACTIONS: tuple[str, ...] = ("export", "eval")
MAX_STEPS = 8
EXPORT_DIR = "export"  # under the export step run's out dir: the Hugging Face folder
EVAL_REPORT = "eval/report.json"  # under the eval step run's out dir


class DataRef(Contract):
    """One data input of the trained run, as the model card records it."""

    name: str  # train_data | validation_data
    kind: str
    value: str
    sha256: str = ""  # the package file's digest ("" for a hub id or a shared path)


class StepSpec(Contract):
    """What makes a run a step run: which action, its place in the pipeline, and its inputs.

    Written by the control plane only (a submission that carries one is refused)."""

    action: StepAction
    index: int = Field(ge=0, le=MAX_STEPS)  # 0-based place in ``actions``
    actions: list[StepAction] = Field(default_factory=list, max_length=MAX_STEPS)
    root_run_id: str  # the training run (or, for ``sf export``, the run exported)
    # The run whose output folder this step reads (training: the checkpoint; export: the model)
    source_run_id: str
    checkpoint_step: int | None = None  # export this checkpoint step (None: the final one)
    # Provenance the job cannot read itself: the root run's final metrics and data digests.
    metrics: dict[str, float] = Field(default_factory=dict)
    data: list[DataRef] = Field(default_factory=list)

    @property
    def remaining(self) -> list[str]:
        return list(self.actions[self.index + 1 :])


class ActionNeeds(Contract):
    """What a method declares for one action (``actions:`` in ``method.yaml``)."""

    gpus: int = Field(default=0, ge=0, le=64)
    after: list[StepAction] = Field(default_factory=list)  # actions that must run before it


def check_steps(steps: Sequence[str], declared: Mapping[str, ActionNeeds], method_id: str) -> None:
    """Refuse a pipeline the method cannot run: an action it does not declare, an action twice,
    or an action before one it needs (``eval`` before ``export``)."""
    if len(steps) > MAX_STEPS:
        raise Rejected(f"--then: at most {MAX_STEPS} steps", hint="drop some --then flags")
    seen: list[str] = []
    for action in steps:
        if action not in declared:
            known = ", ".join(declared) or "none"
            raise Rejected(
                f"--then {action}: method {method_id} does not declare the action {action!r}",
                hint=f"actions of {method_id}: {known} (`sf methods {method_id}`)",
                details={"action": action, "method": method_id, "declared": list(declared)},
            )
        if action in seen:
            raise Rejected(
                f"--then {action} is given twice", hint="name each action once, in order"
            )
        missing = [a for a in declared[action].after if a not in seen]
        if missing:
            need = missing[0]
            raise Rejected(
                f"--then {action} needs --then {need} before it ({method_id} {action}s the "
                f"{need}ed model)",
                hint=f"write --then {need} --then {action}",
                details={"action": action, "needs": missing},
            )
        seen.append(action)


ENDED_SHORT = frozenset({"failed", "stopped"})


def progress(root_status: str, step_statuses: Sequence[str | None]) -> str:
    """``done/total`` of a pipeline, with ``!`` when it stopped short: the training or a step
    failed or was stopped, or a step that should have followed a success was never created (a
    method that no longer declares it); "" for a run without steps. A gate that fails ends its
    eval step ``failed``, so it shows as short too."""
    total = len(step_statuses)
    if total == 0:
        return ""
    done = sum(1 for s in step_statuses if s == "succeeded")
    short = root_status in ENDED_SHORT
    before = root_status
    for status in step_statuses:
        if status in ENDED_SHORT or (status is None and before == "succeeded"):
            short = True
        before = status or ""
    return f"{done}/{total}{'!' if short else ''}"
