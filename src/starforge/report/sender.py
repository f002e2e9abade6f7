"""The background sender of ``starforge.report``: batches, retries, spools, replays, drains.

Training threads only append to a deque (:meth:`Sender.put`); one daemon thread takes what is
there every ``flush_interval_s`` (sooner when a lot is waiting), merges it into batches of at most
``batch_points`` points and posts them to the run's ingest endpoint. Guarantees:

* nothing here raises into training: every failure is counted in :class:`Stats`;
* while the server is unreachable, points are kept in memory and retried with backoff; past
  ``max_memory_points`` the oldest go to a spool file (JSON lines, one batch per line), and so
  does everything left when :meth:`Sender.close` gives up;
* spool files found in the spool folder (this process's, or those a crashed or stopped earlier
  attempt left) are replayed first, oldest first, and deleted once the server took them — the
  server keeps the last value per (key, step), so a replay that overlaps is harmless;
* a batch the server refuses for good (a bad token, an unknown run) is dropped and counted,
  never retried forever;
* after a failed send it looks for the control plane's beacon (a restarted server has a new
  address) and, when the address changed, sends there next.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pydantic_core

if TYPE_CHECKING:
    from starforge.client.http import Client

MAX_BACKOFF_S = 30.0


@dataclass
class Stats:
    points_sent: int = 0
    batches_sent: int = 0
    points_rejected: int = 0  # refused for good by the server (bad token, unknown run)
    points_spooled: int = 0
    points_replayed: int = 0
    send_failures: int = 0
    last_error: str = ""


@dataclass
class Batch:
    """Consecutive items merged: metric steps in order, hyperparameters and metadata merged."""

    steps: list[dict[str, Any]] = field(default_factory=list)
    hparams: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    points: int = 0

    def body(self, attempt: int) -> dict[str, Any]:
        payload: dict[str, Any] = {"attempt": attempt, "steps": self.steps}
        if self.hparams:
            payload["hparams"] = self.hparams
        if self.meta:
            payload["meta"] = self.meta
        return payload


class Spool:
    """Batches waiting on disk: this process writes its own file, and replays any file there."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        host = socket.gethostname().replace("/", "_")
        self.path = folder / f"spool-{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl"

    def write(self, bodies: list[dict[str, Any]]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as fh:
            for body in bodies:
                fh.write(json.dumps(body, separators=(",", ":")) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def files(self) -> list[Path]:
        try:
            found = [p for p in self.folder.glob("spool-*.jsonl") if p.is_file()]
        except OSError:
            return []
        return sorted(found, key=lambda p: (p.stat().st_mtime, p.name))

    def claim(self, path: Path) -> Path | None:
        """Rename a spool file to this process's name for it, so two replayers never share one."""
        claimed = path.with_name(path.name + f".{os.getpid()}.sending")
        try:
            os.replace(path, claimed)
        except OSError:
            return None
        return claimed


class Sender(threading.Thread):
    def __init__(
        self,
        client_factory: Any,
        run_id: str,
        attempt: int,
        *,
        spool: Spool | None,
        flush_interval_s: float = 0.5,
        batch_points: int = 20_000,
        max_memory_points: int = 1_000_000,
        relocate: Any = None,
    ) -> None:
        super().__init__(name="starforge-report", daemon=True)
        # Called after a failed send: True when the server's address changed (a restarted
        # control plane), so the next send goes to the new one.
        self.relocate = relocate
        self.client_factory = client_factory
        self.run_id = run_id
        self.attempt = attempt
        self.spool = spool
        self.flush_interval_s = flush_interval_s
        self.batch_points = batch_points
        self.max_memory_points = max_memory_points
        self.stats = Stats()
        # Metric steps as their wire dicts ({"step", "t", "values"}); ("hparams"|"meta", dict).
        self.queue: collections.deque[Any] = collections.deque()
        self.wake = threading.Event()
        self.idle = threading.Event()  # set whenever everything queued so far was handled
        self.pending: list[Batch] = []
        self.closing = False
        self.close_deadline = 0.0
        self.retry_at = 0.0
        self.backoff_s = 0.5
        self._client: Client | None = None

    # ---- the training side ----------------------------------------------------------------

    def put(self, item: Any) -> None:
        self.queue.append(item)
        if len(self.queue) & 4095 == 0:  # every 4096 items: wake the sender early
            self.wake.set()

    def flush(self, timeout_s: float) -> bool:
        """Ask for a send now and wait until the queue is handled (True) or the timeout."""
        self.idle.clear()
        self.wake.set()
        return self.idle.wait(timeout_s)

    def close(self, timeout_s: float) -> None:
        """Send what is left, spool what cannot be sent within ``timeout_s``, stop."""
        self.close_deadline = time.monotonic() + timeout_s
        self.closing = True
        self.wake.set()
        self.join(timeout_s + 5.0)

    # ---- the sender thread ------------------------------------------------------------------

    def run(self) -> None:
        try:
            while True:
                self.wake.wait(self.flush_interval_s)
                self.wake.clear()
                closing = self.closing
                self._take()
                done = self._send_all(closing) and not self.queue
                if done:
                    self.idle.set()
                if not closing:
                    continue
                if done:
                    return
                if time.monotonic() >= self.close_deadline:
                    self._take()
                    self._spill(self.pending)
                    return
                time.sleep(0.2)
        except Exception as exc:  # a bug must not kill training; keep what can be kept
            self.stats.last_error = f"sender stopped: {exc!r}"
            with contextlib.suppress(Exception):
                self._take()
                self._spill(self.pending)
        finally:
            if self._client is not None:
                with contextlib.suppress(Exception):
                    self._client.close()

    def _take(self) -> None:
        """Move queued items into batches (steps in order; the same step merges)."""
        batch = self.pending[-1] if self.pending else None
        while self.queue:
            item = self.queue.popleft()
            if batch is None or batch.points >= self.batch_points:
                batch = Batch()
                self.pending.append(batch)
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
        self._limit_memory()

    def _limit_memory(self) -> None:
        held = sum(b.points for b in self.pending)
        if held <= self.max_memory_points or len(self.pending) < 2:
            return
        spill: list[Batch] = []
        while self.pending and held > self.max_memory_points // 2 and len(self.pending) > 1:
            batch = self.pending.pop(0)
            held -= batch.points
            spill.append(batch)
        self._spill(spill)

    def _spill(self, batches: list[Batch]) -> None:
        if not batches:
            return
        points = sum(b.points for b in batches)
        if self.spool is None:
            self.stats.last_error = f"lost {points} point(s): the server is unreachable"
        else:
            try:
                self.spool.write([b.body(self.attempt) for b in batches])
                self.stats.points_spooled += points
            except OSError as exc:
                self.stats.last_error = f"lost {points} point(s): cannot spool: {exc}"
        if batches is self.pending:
            self.pending = []

    def _send_all(self, closing: bool) -> bool:
        """Replay spool files, then send pending batches; False while the server is away."""
        if not closing and time.monotonic() < self.retry_at:
            return False
        if self.spool is not None and not self._replay():
            return False
        while self.pending:
            batch = self.pending[0]
            if not self._post(batch.body(self.attempt), batch.points):
                return False
            self.pending.pop(0)
            self.stats.points_sent += batch.points
        return True

    def _replay(self) -> bool:
        assert self.spool is not None
        for path in self.spool.files():
            claimed = self.spool.claim(path)
            if claimed is None:
                continue  # another process took it
            try:
                lines = claimed.read_text(encoding="utf-8").splitlines()
            except OSError:
                continue
            for i, line in enumerate(lines):
                try:
                    body = json.loads(line)
                except ValueError:
                    continue  # a line cut by a crash mid-write
                points = sum(len(s.get("values", {})) for s in body.get("steps", []))
                if not self._post(body, points):
                    rest = "".join(ln + "\n" for ln in lines[i:])
                    with contextlib.suppress(OSError):
                        claimed.write_text(rest, encoding="utf-8")
                        os.replace(claimed, path)
                    return False
                self.stats.points_replayed += points
            with contextlib.suppress(OSError):
                claimed.unlink()
        return True

    def _post(self, body: dict[str, Any], points: int) -> bool:
        """True when the server took the batch or refused it for good; False to retry later."""
        from starforge.contract.errors import ServerError, ServerUnreachable, StarForgeError

        try:
            if self._client is None:
                self._client = self.client_factory()
            assert self._client is not None
            # Serialised by pydantic-core from plain data (the server validates it): the GIL
            # this thread holds is time the training loop waits.
            self._client.ingest(self.run_id, pydantic_core.to_json(body, fallback=str))
        except (ServerUnreachable, ServerError) as exc:
            self._failed(exc.message)
            return False
        except StarForgeError as exc:
            self.stats.points_rejected += points
            self.stats.last_error = f"the server refused {points} point(s): {exc.message}"
            return True
        except Exception as exc:
            self._failed(repr(exc))
            return False
        self.stats.batches_sent += 1
        self.backoff_s = 0.5
        self.retry_at = 0.0
        return True

    def _failed(self, why: str) -> None:
        self.stats.send_failures += 1
        self.stats.last_error = why
        if self.relocate is not None and self.relocate():
            # The control plane restarted elsewhere: try the new address at once.
            if self._client is not None:
                with contextlib.suppress(Exception):
                    self._client.close()
            self._client = None
            self.backoff_s, self.retry_at = 0.5, 0.0
            return
        self.retry_at = time.monotonic() + self.backoff_s
        self.backoff_s = min(self.backoff_s * 2, MAX_BACKOFF_S)
