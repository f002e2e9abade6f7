"""Lifecycle reports from a runner to the control plane, and the exit record on disk.

Reports are retried with backoff; a runner never dies because the server is away. The exit
record (``state/attempt-<n>.node-<r>.exit.json``) is written before the final report, so a server
that missed the report finalises the attempt from the file.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from starforge.client.http import Client
from starforge.contract.api import LifecycleEvent
from starforge.contract.env import Binding
from starforge.contract.errors import StarForgeError
from starforge.contract.states import EndReason


class Reporter:
    def __init__(self, binding: Binding, log: Callable[[str], None]) -> None:
        self.binding = binding
        self._log = log
        self._client = (
            Client(binding.endpoint, run_token=binding.run_token, timeout=10.0)
            if binding.endpoint
            else None
        )

    def send(
        self,
        event: str,
        *,
        exit_code: int | None = None,
        end_reason: EndReason | None = None,
        message: str = "",
        patience_s: float = 5.0,
    ) -> bool:
        if self._client is None:
            return False
        body = LifecycleEvent.model_validate(
            {
                "attempt": self.binding.attempt,
                "node_rank": self.binding.node_rank,
                "event": event,
                "exit_code": exit_code,
                "end_reason": end_reason,
                "message": message,
            }
        )
        deadline = time.monotonic() + patience_s
        delay = 0.2
        while True:
            try:
                self._client.lifecycle(self.binding.run_id, body)
                return True
            except StarForgeError as exc:
                if time.monotonic() + delay > deadline:
                    self._log(f"could not report {event!r} to the server: {exc.message}")
                    return False
            time.sleep(delay)
            delay = min(delay * 2, 5.0)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def exit_record_path(binding: Binding) -> Path:
    return (
        Path(binding.run_dir)
        / "state"
        / f"attempt-{binding.attempt}.node-{binding.node_rank}.exit.json"
    )


def write_exit_record(binding: Binding, exit_code: int, end_reason: EndReason | None) -> None:
    path = exit_record_path(binding)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(
        json.dumps(
            {
                "exit_code": exit_code,
                "end_reason": end_reason.value if end_reason else None,
                "at": time.time(),
            }
        )
    )
    os.replace(tmp, path)
