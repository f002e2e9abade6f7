"""Eval gates as the user sees them: the bound a run's config sets and how the eval judged it.

The eval step (``starforge.steps.eval``) judges the gate, records its verdict in its report
(``<eval step run>/out/eval/report.json``) and exits 3 when the gate failed. This module reads
that report back, leniently (a missing, torn or foreign file is "not judged yet"), for two
things: the failed eval step's reason, which names the gate, the metric's value and the
threshold instead of a bare exit code, and :class:`~starforge.contract.api.GateView` in ``sf job
status`` of the eval step and of the training run whose pipeline it ends. Nothing here writes.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from starforge.contract.api import GateView, RunView
from starforge.contract.errors import ConfigError
from starforge.contract.steps import EVAL_REPORT
from starforge.server.db.models import Run
from starforge.server.runtime import Runtime
from starforge.steps import gate as gates

MAX_REPORT_BYTES = 1 << 20  # a report is a few hundred bytes: a bigger file is not read


def is_eval_step(run: Run) -> bool:
    step = (run.spec or {}).get("step") or {}
    return isinstance(step, dict) and step.get("action") == "eval"


def _report(path: Path) -> dict[str, Any]:
    try:
        if path.stat().st_size > MAX_REPORT_BYTES:
            return {}
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def view_of(rt: Runtime, run: Run, eval_run_id: str) -> GateView | None:
    """The gate of ``run``'s config as eval step ``eval_run_id`` judged it (None: no gate)."""
    try:
        gate = gates.gate_of(run.config)
    except ConfigError:
        return None
    if gate is None:
        return None
    out = rt.storage.run_layout(run.user, run.project, run.experiment, eval_run_id).out
    verdict = _report(out / EVAL_REPORT).get("gate")
    verdict = verdict if isinstance(verdict, dict) else {}
    value = verdict.get("value")
    passed = verdict.get("passed")
    return GateView(
        run_id=eval_run_id,
        metric=gate.metric,
        bound="min" if gate.min is not None else "max",
        threshold=gate.min if gate.min is not None else float(gate.max or 0.0),
        value=float(value)
        if isinstance(value, int | float) and math.isfinite(float(value))
        else None,
        passed=passed if isinstance(passed, bool) else None,
        reason=str(verdict.get("reason") or "")[:500],
    )


def describe(view: GateView) -> str:
    """One line: ``eval gate failed: loss = 2.31, at most 0.001 required``."""
    need = "at least" if view.bound == "min" else "at most"
    word = {True: "passed", False: "failed", None: "not judged yet"}[view.passed]
    got = f"{view.value:.6g}" if view.value is not None else "no finite value"
    if view.passed is None:
        return f"eval gate {view.metric} {need} {view.threshold:g}: {word}"
    return f"eval gate {word}: {view.metric} = {got}, {need} {view.threshold:g} required"


def failure_reason(rt: Runtime, run: Run, exit_code: int | None) -> str | None:
    """The reason of an eval step whose gate failed (exit 3 and a failed verdict), else None."""
    if exit_code != gates.EXIT_GATE_FAILED or not is_eval_step(run):
        return None
    found = view_of(rt, run, run.id)
    if found is None or found.passed is not False:
        return None
    return f"{describe(found)} (exit code {exit_code})"


def attach(rt: Runtime, run: Run, view: RunView) -> None:
    """Fill ``view.gate``: an eval step's own, or a training run's from its eval step."""
    if view.step is not None:
        if view.step.action == "eval":
            view.gate = view_of(rt, run, run.id)
        return
    step = next((s for s in view.steps if s.action == "eval" and s.run_id), None)
    if step is not None:
        view.gate = view_of(rt, run, step.run_id)
