"""The eval gate: ``eval: {gate: {metric: NAME, min: X}}`` (or ``max: X``) in a config.

Pure functions, run twice: by admission (:func:`check_gate_config`, a gate on a metric the
method's eval does not produce is a rejection, exit 2, nothing created) and by the eval program
(:func:`judge`, which says whether the report's metrics pass). The metrics each method's eval
produces are listed once here, in :data:`EVAL_METRICS`; ``trl/grpo`` also produces one
``rewards/<function>`` per reward function, which only the experiment's code names.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import Field, model_validator

from starforge.contract.base import Contract
from starforge.contract.errors import ConfigError

SECTION = "eval"  # the top-level config section the platform's eval reads (never the trainer)
EVAL_METRICS: dict[str, tuple[str, ...]] = {
    "trl/sft": ("loss", "perplexity", "tokens"),
    "trl/dpo": ("accuracy", "loss", "margin"),
    "trl/grpo": ("reward", "reward_std"),
}
PER_FUNCTION_PREFIX = {"trl/grpo": "rewards/"}  # rewards/<reward function name>
EXIT_GATE_FAILED = 3  # the eval program's exit status when the gate fails (2: bad input)


class Gate(Contract):
    """A bound on one eval metric: ``min`` (the metric must be at least) or ``max`` (at most)."""

    metric: str = Field(min_length=1, max_length=200)
    min: float | None = None
    max: float | None = None

    @model_validator(mode="after")
    def _one_bound(self) -> Gate:
        if (self.min is None) == (self.max is None):
            raise ValueError("give exactly one of min or max")
        return self

    def describe(self) -> str:
        return (
            f"{self.metric} >= {self.min}"
            if self.min is not None
            else f"{self.metric} <= {self.max}"
        )


class Verdict(Contract):
    """The gate's answer, as the eval report records it."""

    metric: str
    value: float | None
    passed: bool
    reason: str


def gate_of(config: Mapping[str, Any] | None) -> Gate | None:
    """The config's gate, or None; a malformed one is a :class:`ConfigError` naming the fix."""
    section = (config or {}).get(SECTION)
    if section is None:
        return None
    if not isinstance(section, Mapping):
        raise ConfigError(
            f"config key {SECTION!r} must be a mapping, "
            f"e.g. {SECTION}: {{gate: {{metric: loss, max: 2.5}}}}"
        )
    raw = section.get("gate")
    if raw is None:
        return None
    try:
        return Gate.model_validate(raw)
    except ValueError as exc:
        raise ConfigError(
            f"{SECTION}.gate is invalid: {' '.join(str(exc).split())[:300]}",
            hint=f"write {SECTION}: {{gate: {{metric: NAME, min: X}}}} or max: X",
            details={"gate": raw if isinstance(raw, dict) else str(raw)},
        ) from None


def produces(method_id: str, metric: str) -> bool:
    """Whether the method's eval reports ``metric``."""
    if metric in EVAL_METRICS.get(method_id, ()):
        return True
    prefix = PER_FUNCTION_PREFIX.get(method_id)
    return bool(prefix and metric.startswith(prefix) and len(metric) > len(prefix))


def check_gate_config(method_id: str, config: Mapping[str, Any] | None) -> Gate | None:
    """Admission's check: the gate is well formed and names a metric the eval produces."""
    gate = gate_of(config)
    if gate is None or produces(method_id, gate.metric):
        return gate
    known = list(EVAL_METRICS.get(method_id, ()))
    if method_id in PER_FUNCTION_PREFIX:
        known.append(f"{PER_FUNCTION_PREFIX[method_id]}<reward function>")
    what = f"produces {', '.join(known)}" if known else "has no platform eval"
    raise ConfigError(
        f"{SECTION}.gate: metric {gate.metric!r} is not produced by the eval of {method_id} "
        f"(it {what})",
        hint=f"gate on one of: {', '.join(known)}" if known else f"remove {SECTION}.gate",
        details={"metric": gate.metric, "method": method_id, "metrics": known},
    )


def judge(gate: Gate, metrics: Mapping[str, float]) -> Verdict:
    """Whether ``metrics`` pass ``gate``; a missing or non-finite value fails, with the reason."""
    value = metrics.get(gate.metric)
    if value is None or not math.isfinite(value):
        return Verdict(
            metric=gate.metric,
            value=None,
            passed=False,
            reason=f"gate {gate.describe()}: the eval produced no finite {gate.metric}",
        )
    passed = value >= gate.min if gate.min is not None else value <= float(gate.max or 0.0)
    word = "passed" if passed else "failed"
    return Verdict(
        metric=gate.metric,
        value=value,
        passed=passed,
        reason=f"gate {gate.describe()} {word}: {gate.metric} = {value:.6g}",
    )
