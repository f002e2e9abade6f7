"""How the report SDK's items become ingest batches for :class:`starforge.client.sender.Sender`.

``log`` queues each step as its wire dict (``{"step", "t", "values"}``); ``log_hparams`` and
metadata as ``("hparams" | "meta", dict)``. Consecutive items merge into a :class:`Batch` of at
most ``batch_points`` points: steps stay in order and a step logged twice in a row merges (the
server keeps the last value per (key, step) anyway), hyperparameters and metadata merge by key.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Batch:
    """Consecutive items merged: metric steps in order, hyperparameters and metadata merged."""

    attempt: int
    steps: list[dict[str, Any]] = field(default_factory=list)
    hparams: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    points: int = 0

    def body(self) -> dict[str, Any]:
        payload: dict[str, Any] = {"attempt": self.attempt, "steps": self.steps}
        if self.hparams:
            payload["hparams"] = self.hparams
        if self.meta:
            payload["meta"] = self.meta
        return payload


class MetricPacker:
    """Merges queued metric steps, hyperparameters and metadata into batches."""

    def __init__(self, attempt: int, batch_points: int = 20_000) -> None:
        self.attempt = attempt
        self.batch_points = batch_points

    def take(self, pending: list[Any], queue: collections.deque[Any]) -> None:
        batch = pending[-1] if pending else None
        while queue:
            item = queue.popleft()
            if batch is None or batch.points >= self.batch_points:
                batch = Batch(self.attempt)
                pending.append(batch)
            if type(item) is dict:  # a metric step, already in its wire form
                steps = batch.steps
                if steps and steps[-1]["step"] == item["step"]:
                    steps[-1]["values"].update(item["values"])
                    steps[-1]["t"] = item["t"]
                else:
                    steps.append(item)
                batch.points += len(item["values"])
            elif item[0] == "hparams":
                batch.hparams.update(item[1])
            elif item[0] == "meta":
                batch.meta.update(item[1])

    def points_of(self, body: dict[str, Any]) -> int:
        return sum(len(s.get("values", {})) for s in body.get("steps", []))
