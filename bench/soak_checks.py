"""The soak's invariants, each a pure function of what the soak read back at the end.

Every check returns ``{"held": bool, "details": {...}}``. Inputs are plain data: run views as the
API returns them (``RunView.model_dump(mode="json")``), the attempt logs' text, the webhook
deliveries the receiver saw, the jobs' own liveness stamps and the accounting report. Nothing here
talks to a server, so each rule reads on its own and the soak's driver stays about driving.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections import Counter, defaultdict
from datetime import datetime
from typing import Any

TERMINAL = {"succeeded", "failed", "stopped"}
STEP_LINE = re.compile(r"^(?:\[[^\]]*\] )?soak step (\d+)/(\d+)$")
DATASET_ROWS = 200  # rows the job writes into its --output-dataset (soak_lab.JOB)

Run = dict[str, Any]


def result(held: bool, **details: Any) -> dict[str, Any]:
    return {"held": held, "details": details}


def when(text: str | None) -> float | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() if text else None


def dataset_bytes(run_id: str) -> bytes:
    """What the job writes as its output dataset's one file (``rows.jsonl``)."""
    rows = (json.dumps({"run_id": run_id, "row": i}) for i in range(DATASET_ROWS))
    return ("\n".join(rows) + "\n").encode()


def settled(runs: list[Run]) -> dict[str, Any]:
    """Every run terminal, or paused with a checkpoint to resume from."""
    unsettled = [
        {"run_id": r["run_id"], "status": r["status"], "reason": r.get("reason", "")}
        for r in runs
        if r["status"] not in TERMINAL and not (r["status"] == "paused" and resumable(r))
    ]
    by_status = Counter(str(r["status"]) for r in runs)
    not_succeeded = [
        {"run_id": r["run_id"], "status": r["status"], "end_reason": r.get("end_reason"),
         "reason": r.get("reason", "")[:160]}
        for r in runs if r["status"] in ("failed", "stopped")
    ]  # fmt: skip
    return result(
        not unsettled,
        runs=len(runs),
        by_status=dict(sorted(by_status.items())),
        unsettled=unsettled,
        not_succeeded=not_succeeded,
    )


def resumable(run: Run) -> bool:
    return any(a.get("resumed_from") for a in run.get("attempts", [])) or "checkpoint" in str(
        run.get("reason", "")
    )


def steps_once(runs: list[Run], pipelines: set[str]) -> dict[str, Any]:
    """Each step of each pipeline exists once; every step owed (training and the steps before
    it succeeded) exists."""
    made: dict[tuple[str, str], list[str]] = defaultdict(list)
    for run in runs:
        step = run.get("step")
        if step:
            made[(step["root_run_id"], step["action"])].append(run["run_id"])
    doubled = {f"{root}:{action}": ids for (root, action), ids in made.items() if len(ids) > 1}
    missing = []
    by_id = {r["run_id"]: r for r in runs}
    for root in sorted(pipelines):
        run = by_id.get(root)
        if run is None or run["status"] != "succeeded":
            continue
        for step in run.get("steps", []):
            if not made.get((root, step["action"])):
                missing.append(f"{root}:{step['action']}")
                break  # the later steps wait on this one
            if by_id.get(made[(root, step["action"])][0], {}).get("status") != "succeeded":
                break
    return result(
        not doubled and not missing,
        pipelines=len(pipelines),
        steps_made=sum(len(ids) for ids in made.values()),
        doubled=doubled,
        missing=missing,
    )


def datasets_once(
    runs: list[Run], outputs: dict[str, str], versions: dict[str, list[dict[str, Any]]]
) -> dict[str, Any]:
    """Each succeeded ``--output-dataset`` run published its version once and whole (the file
    the job wrote, byte for byte); a run that did not succeed published nothing.

    ``outputs``: run id → OWNER/NAME@VERSION; ``versions``: OWNER/NAME → the versions listed,
    each with its ``files`` (``dataset show``)."""
    by_id = {r["run_id"]: r for r in runs}
    wrong: list[dict[str, Any]] = []
    published = 0
    for run_id, ref in sorted(outputs.items()):
        name, version = ref.split("@")
        listed = versions.get(name, [])
        status = by_id.get(run_id, {}).get("status")
        if status != "succeeded":
            if listed:
                wrong.append({"run_id": run_id, "status": status, "published": len(listed)})
            continue
        if [v["version"] for v in listed] != [version]:
            wrong.append({"run_id": run_id, "versions": [v["version"] for v in listed]})
            continue
        expected = dataset_bytes(run_id)
        files = [(f["path"], f["sha256"], f["size"]) for f in listed[0].get("files", [])]
        if files != [("rows.jsonl", hashlib.sha256(expected).hexdigest(), len(expected))]:
            wrong.append({"run_id": run_id, "files": files})
            continue
        published += 1
    return result(not wrong, output_runs=len(outputs), published_whole=published, wrong=wrong)


def webhooks_once(runs: list[Run], deliveries: list[dict[str, Any]]) -> dict[str, Any]:
    """Each terminal run's end is one webhook event: one delivery id per (run, status), however
    many times that id was delivered (a retry), and no event for a status a run never ended in."""
    ids_of: dict[tuple[str, str], set[str]] = defaultdict(set)
    for d in deliveries:
        ids_of[(d["run_id"], d["status"])].add(d["delivery"])
    expected = {(r["run_id"], r["status"]) for r in runs if r["status"] in TERMINAL}
    doubled = {f"{k[0]}:{k[1]}": sorted(v) for k, v in ids_of.items() if len(v) > 1}
    missing = sorted(f"{run}:{status}" for run, status in expected - set(ids_of))
    unexpected = sorted(f"{run}:{status}" for run, status in set(ids_of) - expected)
    retries = len(deliveries) - sum(len(v) for v in ids_of.values())
    return result(
        not doubled and not missing and not unexpected,
        events_expected=len(expected),
        deliveries=len(deliveries),
        retried_deliveries=retries,
        doubled=doubled,
        missing=missing,
        unexpected=unexpected,
    )


def log_numbers(text: str) -> tuple[list[int], int | None]:
    """The step numbers an attempt's log holds, in order, and the total they count to."""
    numbers, total = [], None
    for line in text.splitlines():
        found = STEP_LINE.match(line.strip())
        if found:
            numbers.append(int(found.group(1)))
            total = int(found.group(2))
    return numbers, total


def checkpoint_step(path: str | None) -> int:
    return int(path.rsplit("step-", 1)[1]) if path and "step-" in path else 0


def logs_exact(runs: list[Run], logs: dict[tuple[str, int], str]) -> dict[str, Any]:
    """In each attempt's log of a soak job, each step number once, with no gap: from the step
    after the checkpoint it resumed from, and up to the last step where the attempt succeeded.

    An attempt cut short (its runner killed, its node lost) may stop anywhere; what it printed
    must still be whole up to there."""
    wrong: list[dict[str, Any]] = []
    lines = attempts = 0
    for run in runs:
        for attempt in run.get("attempts", []):
            text = logs.get((run["run_id"], attempt["number"]))
            if text is None:
                continue
            numbers, total = log_numbers(text)
            attempts += 1
            lines += len(numbers)
            first = checkpoint_step(attempt.get("resumed_from")) + 1
            where = {"run_id": run["run_id"], "attempt": attempt["number"]}
            doubled = sorted(n for n, c in Counter(numbers).items() if c > 1)
            if doubled:
                wrong.append({**where, "doubled": doubled[:10]})
            elif numbers and numbers != list(range(first, first + len(numbers))):
                gaps = sorted(set(range(first, max(numbers) + 1)) - set(numbers))
                wrong.append({**where, "from": first, "lost": gaps[:10], "head": numbers[:3]})
            ended_well = attempt.get("end_reason") is None and attempt.get("exit_code") == 0
            if ended_well and total is not None and (not numbers or numbers[-1] != total):
                wrong.append({**where, "last": numbers[-1] if numbers else None, "of": total})
    return result(not wrong, attempts_read=attempts, step_lines=lines, wrong=wrong)


def one_attempt_alive(runs: list[Run], stamps: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """No two attempts of one run alive at once: by the attempts' own records (each started after
    the one before it ended; a settled run has no attempt without an end) and by the jobs' own
    clocks (the soak job stamps each step with its attempt: no attempt stamps a step after the
    next attempt's first)."""
    overlaps: list[dict[str, Any]] = []
    open_ended: list[dict[str, Any]] = []
    for run in runs:
        rows = sorted(run.get("attempts", []), key=lambda a: a["number"])
        for before, after in itertools.pairwise(rows):
            end, start = when(before.get("ended_at")), when(after.get("started_at"))
            if start is not None and (end is None or start < end):
                overlaps.append({"run_id": run["run_id"], "by": "records",
                                 "attempts": [before["number"], after["number"]]})  # fmt: skip
        if run["status"] in TERMINAL | {"paused"}:
            open_ended += [
                {"run_id": run["run_id"], "attempt": a["number"]}
                for a in rows
                if a.get("started_at") and not a.get("ended_at")
            ]
        spans: dict[int, list[float]] = defaultdict(list)
        for stamp in stamps.get(run["run_id"], []):
            spans[int(stamp["attempt"])].append(float(stamp["t"]))
        ordered = sorted(spans.items())
        for (a, ts_a), (b, ts_b) in itertools.pairwise(ordered):
            if max(ts_a) > min(ts_b):
                overlaps.append({"run_id": run["run_id"], "by": "job clocks", "attempts": [a, b],
                                 "seconds": round(max(ts_a) - min(ts_b), 3)})  # fmt: skip
    return result(
        not overlaps and not open_ended,
        runs_with_stamps=len(stamps),
        overlaps=overlaps,
        attempts_never_ended=open_ended,
    )


def gpu_hours(runs: list[Run], usage_total: float) -> dict[str, Any]:
    """The accounting report's GPU-hours equal the sum over attempts of their GPUs × their
    duration (from the attempts' start and end), within a second's worth of every GPU."""
    total = 0.0
    for run in runs:
        for attempt in run.get("attempts", []):
            start, end = when(attempt.get("started_at")), when(attempt.get("ended_at"))
            if start is not None and end is not None:
                total += int(run.get("gpus") or 0) * (end - start) / 3600
    gpus = sum(int(r.get("gpus") or 0) for r in runs) or 1
    tolerance = max(1e-6, gpus / 3600)
    return result(
        abs(total - usage_total) <= tolerance,
        from_attempts=round(total, 6),
        accounting=round(usage_total, 6),
        tolerance=round(tolerance, 6),
    )
