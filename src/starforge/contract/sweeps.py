"""Sweeps: a grid of parameter values run as one variant (a normal run) per combination.

The grid is a cartesian product of ``-g KEY=V1,V2,...`` axes, at most :data:`MAX_VARIANTS`
combinations; each value is typed and checked against the method's declaration exactly like a
``-s`` value (:func:`starforge.contract.params.parse_sets`), so a sweep is refused before anything
is packed. Early stopping is ASHA on one reported metric (see
``server/services/workflows/asha.py``): at each rung (a step count) the variants outside the top
``1/keep`` of those that reached it are stopped. These are the request and response bodies of
``/api/v1/sweeps``.
"""

from __future__ import annotations

import itertools
from datetime import datetime
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from starforge.contract import params
from starforge.contract.answering import AnsweredEndReason
from starforge.contract.api import ActionResult, RunView, SubmitResponse
from starforge.contract.base import Contract
from starforge.contract.errors import ParamError, UsageError
from starforge.contract.jobspec import JobSpec, Manifest, check_finite
from starforge.contract.params import Param
from starforge.contract.states import JobStatus

MAX_VARIANTS = 64  # the closed StarForge's cap on one sweep
MAX_RUNGS = 16


def split_axis(raw: str) -> tuple[str, list[str]]:
    """``KEY=V1,V2,...`` as the key and its value texts (each non-empty, none twice)."""
    key, text = params.split_set(raw, "-g")
    values = [v.strip() for v in text.split(",")]
    if any(not v for v in values):
        raise UsageError(
            f"-g {raw}: an empty value in the list",
            hint="give the values separated by commas, e.g. -g learning_rate=1e-5,3e-5",
        )
    if len(set(values)) != len(values):
        raise UsageError(f"-g {raw}: a value is listed twice", hint="list each value once")
    return key, values


def parse_grid(declared: dict[str, Param], axes: list[str]) -> dict[str, list[Any]]:
    """Every ``-g`` axis typed and checked like ``-s`` (did-you-mean for an unknown key)."""
    grid: dict[str, list[Any]] = {}
    for raw in axes:
        key, values = split_axis(raw)
        if key in grid:
            raise UsageError(f"-g {key}: the parameter has two axes", hint="give it one -g")
        grid[key] = [params.parse_sets(declared, [f"{key}={v}"], "-g")[key] for v in values]
    if not grid:
        raise UsageError("a sweep needs at least one -g KEY=V1,V2,...", hint="sf sweep --help")
    return grid


def expand(grid: dict[str, list[Any]], cap: int = MAX_VARIANTS) -> list[dict[str, Any]]:
    """The cartesian product of ``grid`` (axes in the given order), refused above ``cap``."""
    count = 1
    for values in grid.values():
        count *= len(values)
    if count > cap:
        sizes = " x ".join(f"{len(v)} ({k})" for k, v in grid.items())
        raise UsageError(
            f"the sweep has {count} variants ({sizes}); at most {cap} are allowed",
            hint="drop values or split the sweep in several",
            details={"variants": count, "cap": cap},
        )
    keys = list(grid)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*grid.values())]


def check_overlap(grid: dict[str, list[Any]], sets: dict[str, Any]) -> None:
    both = sorted(set(grid) & set(sets))
    if both:
        raise ParamError(
            f"{', '.join(both)} is both swept (-g) and fixed (-s)",
            hint="give each parameter either -g or -s",
            details={"params": both},
        )


class EarlyStop(Contract):
    """ASHA on ``metric``: at each rung the variants outside the top ``1/keep`` stop."""

    metric: str = Field(min_length=1, max_length=200)
    rungs: list[int] = Field(min_length=1, max_length=MAX_RUNGS)
    keep: int = Field(default=3, ge=2, le=MAX_VARIANTS)
    mode: Literal["min", "max"] = "min"

    @field_validator("rungs")
    @classmethod
    def _ascending(cls, v: list[int]) -> list[int]:
        if any(r < 1 for r in v) or any(b <= a for a, b in itertools.pairwise(v)):
            raise ValueError("rungs are step counts >= 1 in increasing order")
        return v


class SweepRequest(Contract):
    spec: JobSpec  # the common spec: hyperparams without the swept ones
    manifest: Manifest  # one package for every variant
    variants: list[dict[str, Any]] = Field(min_length=1, max_length=MAX_VARIANTS)
    early_stop: EarlyStop | None = None
    idempotency_key: str = Field(min_length=8, max_length=100)
    max_retries: int | None = Field(default=None, ge=0, le=100)

    @model_validator(mode="after")
    def _variants(self) -> SweepRequest:
        check_finite(self.variants, "variants")
        if len({repr(sorted(v.items())) for v in self.variants}) != len(self.variants):
            raise ValueError("two variants have the same parameters")
        return self


class SweepCreated(Contract):
    sweep_id: str
    created: bool = True
    runs: list[SubmitResponse] = Field(default_factory=list)


class VariantView(Contract):
    run_id: str
    index: int
    params: dict[str, Any]
    status: JobStatus
    end_reason: AnsweredEndReason | None = None
    reason: str = ""
    metric: float | None = None  # the latest reported value of the sweep's metric
    step: int | None = None  # the step of that value
    rank: int | None = None  # 1 = best; None without a value


class SweepView(Contract):
    sweep_id: str
    user: str
    project: str
    experiment: str
    created_at: datetime
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    early_stop: EarlyStop | None = None
    metric: str = ""  # what the variants are ranked by
    variants: list[VariantView] = Field(default_factory=list)  # best first


class SweepList(Contract):
    sweeps: list[SweepView]


class SweepRuns(Contract):
    runs: list[RunView]


class SweepStopped(Contract):
    results: list[ActionResult] = Field(default_factory=list)  # one per variant that had not ended
