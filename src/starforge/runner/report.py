"""Lifecycle reports from a runner to the control plane, heartbeats, and the records on disk.

A runner never dies, and never waits to train, because the server is away. Events go into an
on-disk spool (``state/attempt-<n>.node-<r>.events.jsonl``) and a background thread delivers
them in order, retrying with backoff for as long as the runner lives; between events it sends a
heartbeat every ``heartbeat_s``. When a delivery fails, the thread re-reads the control plane's
beacon (``<storage root>/control-plane.json``, rewritten by every server start), so a runner
follows a server that restarted on another port.

The server's answer fences the runner: an event or heartbeat it does not accept (or a token it
no longer knows, because a newer attempt took over) means this attempt is over, and the runner
is told through ``on_fenced`` so it stops its training: an attempt never has two live runners.

Two records let a server that missed everything catch up from the run dir: the runner record
(``…runner.json``: pid and process group, written first) and the exit record (``…exit.json``,
written before the final report).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from starforge.client.http import Client
from starforge.contract.api import CONTROL_PLANE_FILE, ControlPlane, LifecycleEvent
from starforge.contract.env import Binding
from starforge.contract.errors import (
    Forbidden,
    NotFound,
    ServerError,
    ServerUnreachable,
    StarForgeError,
)
from starforge.contract.states import EndReason

DEFAULT_HEARTBEAT_S = 5.0
MAX_BACKOFF_S = 2.0


def _state_file(binding: Binding, suffix: str) -> Path:
    return (
        Path(binding.run_dir)
        / "state"
        / f"attempt-{binding.attempt}.node-{binding.node_rank}.{suffix}"
    )


def exit_record_path(binding: Binding) -> Path:
    return _state_file(binding, "exit.json")


def runner_record_path(binding: Binding) -> Path:
    return _state_file(binding, "runner.json")


def spool_path(binding: Binding) -> Path:
    return _state_file(binding, "events.jsonl")


def _write_atomic(path: Path, payload: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload))
    os.replace(tmp, path)


def write_runner_record(binding: Binding) -> None:
    """Who runs this node (so a server that never recorded the start can adopt it)."""
    _write_atomic(
        runner_record_path(binding),
        {
            "pid": os.getpid(),
            "pgid": os.getpgid(0),
            "host": socket.gethostname(),
            "at": time.time(),
        },
    )


def write_exit_record(binding: Binding, exit_code: int, end_reason: EndReason | None) -> None:
    _write_atomic(
        exit_record_path(binding),
        {
            "exit_code": exit_code,
            "end_reason": end_reason.value if end_reason else None,
            "at": time.time(),
        },
    )


def read_beacon(storage_root: str) -> ControlPlane | None:
    try:
        text = (Path(storage_root) / CONTROL_PLANE_FILE).read_text()
        return ControlPlane.read(text)
    except (OSError, ValueError):
        return None


class Reporter:
    """The runner's courier: spooled events in order, heartbeats, and fencing."""

    def __init__(
        self,
        binding: Binding,
        log: Callable[[str], None],
        *,
        on_fenced: Callable[[str], None] | None = None,
    ) -> None:
        self.binding = binding
        self._log = log
        self._on_fenced = on_fenced
        self.fenced = False
        self.enabled = bool(binding.endpoint)
        self.url = binding.endpoint
        beacon = read_beacon(binding.storage_root)
        self.heartbeat_s = beacon.heartbeat_s if beacon else DEFAULT_HEARTBEAT_S
        self._client: Client | None = None
        self._spool = spool_path(binding)
        self._offset = 0  # bytes of the spool already delivered
        self._written = 0  # bytes of the spool written
        self._cond = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="starforge-reporter", daemon=True)
        self.unreachable_since: float | None = None

    # ---- the runner's side ----------------------------------------------------------------

    def start(self) -> None:
        if self.enabled:
            self._spool.parent.mkdir(parents=True, exist_ok=True)
            self._spool.write_bytes(b"")
            self._thread.start()

    def send(
        self,
        event: str,
        *,
        exit_code: int | None = None,
        end_reason: EndReason | None = None,
        message: str = "",
    ) -> None:
        """Queue an event (durably, in the spool); it is delivered in order, in the background."""
        if not self.enabled:
            return
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
        line = (body.model_dump_json() + "\n").encode()
        with self._cond:
            with open(self._spool, "ab") as fh:
                fh.write(line)
                fh.flush()
                os.fsync(fh.fileno())
            self._written += len(line)
            self._cond.notify_all()

    def close(self, patience_s: float = 60.0) -> bool:
        """Wait up to ``patience_s`` for the spool to drain, then stop; True when it drained."""
        if not self.enabled or not self._thread.is_alive():
            return True
        deadline = time.monotonic() + patience_s
        with self._cond:
            while self._offset < self._written and time.monotonic() < deadline:
                self._cond.wait(timeout=min(0.5, max(deadline - time.monotonic(), 0.01)))
            drained = self._offset >= self._written
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout=5.0)
        if not drained:
            self._log("the server did not answer; it will read this attempt's exit record instead")
        if self._client is not None:
            self._client.close()
        return drained

    # ---- the courier thread -----------------------------------------------------------------

    def _run(self) -> None:
        next_beat = time.monotonic()
        backoff = 0.0
        while True:
            with self._cond:
                while not self._closing and self._offset >= self._written:
                    wait = next_beat - time.monotonic()
                    if wait <= 0:
                        break
                    self._cond.wait(timeout=wait)
                if self._closing:
                    return
            try:
                delivered = self._deliver_spool() and self._beat_if_due(next_beat)
            except Exception as exc:  # never let the courier die: the runner must live on
                self._log(f"reporter error: {exc!r}")
                delivered = False
            if delivered:
                backoff = 0.0
                if time.monotonic() >= next_beat:
                    next_beat = time.monotonic() + self.heartbeat_s
                continue
            backoff = min(max(backoff * 2, 0.2), MAX_BACKOFF_S, self.heartbeat_s)
            with self._cond:
                if not self._closing:
                    self._cond.wait(timeout=backoff)

    def _deliver_spool(self) -> bool:
        """Post every spooled event not yet delivered, in order; False on a transport failure."""
        while self._offset < self._written:
            with open(self._spool, "rb") as fh:
                fh.seek(self._offset)
                line = fh.readline()
            if not line.endswith(b"\n"):
                return True  # half a line: the writer is mid-append
            event = LifecycleEvent.model_validate_json(line)
            if not self._post(event):
                return False
            with self._cond:
                self._offset += len(line)
                self._cond.notify_all()
        return True

    def _beat_if_due(self, next_beat: float) -> bool:
        if time.monotonic() < next_beat or self.fenced:
            return True
        event = LifecycleEvent(
            attempt=self.binding.attempt, node_rank=self.binding.node_rank, event="heartbeat"
        )
        return self._post(event)

    def _post(self, event: LifecycleEvent) -> bool:
        """One delivery: True when the server answered (accepted or not), False to retry."""
        try:
            accepted = self._connect().lifecycle(self.binding.run_id, event)
        except (ServerUnreachable, ServerError) as exc:
            self._unreachable(exc)
            return False
        except (Forbidden, NotFound) as exc:  # a newer attempt holds the run's token
            self._fence(f"the server refuses this attempt's reports ({exc.message})")
            return True
        except StarForgeError as exc:  # a request the server will never take: drop it
            self._log(f"the server rejected the {event.event!r} report: {exc.message}")
            return True
        if self.unreachable_since is not None:
            away = time.monotonic() - self.unreachable_since
            self._log(f"reached the server again at {self.url} after {away:.1f} s")
            self.unreachable_since = None
        if not accepted and event.event != "exited":
            self._fence(f"the server says attempt {self.binding.attempt} is over")
        return True

    def _connect(self) -> Client:
        if self._client is None:
            self._client = Client(self.url, run_token=self.binding.run_token, timeout=10.0)
        return self._client

    def _unreachable(self, exc: StarForgeError) -> None:
        if self.unreachable_since is None:
            self.unreachable_since = time.monotonic()
            self._log(f"cannot reach the server ({exc.message}); reports are kept and retried")
        beacon = read_beacon(self.binding.storage_root)
        if beacon is not None:
            self.heartbeat_s = beacon.heartbeat_s
            if beacon.url and beacon.url != self.url:
                self._log(f"the server moved to {beacon.url}")
                self.url = beacon.url
                if self._client is not None:
                    self._client.close()
                self._client = None

    def _fence(self, why: str) -> None:
        if self.fenced:
            return
        self.fenced = True
        self._log(f"{why}; stopping")
        if self._on_fenced is not None:
            self._on_fenced(why)
