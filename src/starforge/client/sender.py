"""The one background sender of a job: batches, retries with backoff, spools, replays, drains.

The runner's lifecycle reports and the report SDK's metrics both go through :class:`Sender`.
The caller only appends to a deque (:meth:`Sender.put`: no lock, no I/O, so the SDK's ``log``
stays a few microseconds); one daemon thread takes what is there every ``flush_interval_s``
(at once after :meth:`Sender.send` or :meth:`Sender.flush`, sooner when a lot is waiting), lets
a :class:`Packer` merge it into packets and hands each packet's body to ``post``. Guarantees:

* nothing here raises into the caller: failures are counted in :class:`Stats`;
* packets are delivered in the order they were made; a packet is retried, with exponential
  backoff, while ``post`` raises :class:`ServerUnreachable` or :class:`ServerError` (or anything
  unexpected); any other :class:`StarForgeError` is the server refusing it for good: it is
  dropped and counted, never retried forever;
* past ``max_memory_points`` the oldest packets go to the :class:`Spool` (JSON lines), and so
  does everything left when :meth:`Sender.close` runs out of time;
* spool files in the spool folder (this process's, or those an earlier process left) are replayed
  first, oldest first, and deleted once delivered;
* after a failed delivery ``relocate`` may say the server moved (a restarted control plane
  publishes its new address in the storage root's beacon, see :func:`read_beacon`): the next try
  goes to the new address at once;
* with ``tick_s`` set, ``tick`` runs whenever everything was delivered and ``tick_s`` passed since
  the last one (the runner's heartbeat).
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from starforge.contract.errors import ServerError, ServerUnreachable, StarForgeError
from starforge.contract.layout import StorageLayout

if TYPE_CHECKING:
    from starforge.client.http import Client
    from starforge.contract.api import ControlPlane

MAX_BACKOFF_S = 30.0
_CLOSE_RETRY_S = 0.2

Body = dict[str, Any]


def read_beacon(storage_root: str) -> ControlPlane | None:
    """The control plane's latest address, or None when there is no readable beacon."""
    if not storage_root:
        return None
    from starforge.contract.api import ControlPlane  # pydantic models: only when needed

    try:
        text = StorageLayout(Path(storage_root)).beacon.read_text(encoding="utf-8")
        return ControlPlane.read(text)  # lenient: a newer server may add fields
    except (OSError, ValueError):
        return None


@dataclass
class Stats:
    points_sent: int = 0
    batches_sent: int = 0
    points_rejected: int = 0  # refused for good by the server (bad token, unknown run)
    points_spooled: int = 0
    points_replayed: int = 0
    send_failures: int = 0
    last_error: str = ""


class Packet(Protocol):
    """What one delivery carries: its wire body and how many points it counts for."""

    points: int

    def body(self) -> Body: ...


class Packer(Protocol):
    """How queued items become packets (a metrics packer merges; the default keeps each)."""

    def take(self, pending: list[Any], queue: collections.deque[Any]) -> None:
        """Drain ``queue`` into ``pending`` (one call per round: no call per item)."""

    def points_of(self, body: Body) -> int: ...


@dataclass
class Single:
    payload: Body
    points: int = 1

    def body(self) -> Body:
        return self.payload


class OneEach:
    """Every item is its own packet (the runner's lifecycle events: each one is a transition)."""

    def take(self, pending: list[Any], queue: collections.deque[Any]) -> None:
        while queue:
            pending.append(Single(queue.popleft()))

    def points_of(self, body: Body) -> int:
        return 1


class Spool:
    """Bodies waiting on disk: this process appends to its own file, and replays any file there."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        host = socket.gethostname().replace("/", "_")
        self.path = self.folder / f"spool-{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl"

    def write(self, bodies: list[Body]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as fh:
            for body in bodies:
                fh.write(json.dumps(body, separators=(",", ":"), default=str) + "\n")
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
        client_factory: Callable[[], Client],
        post: Callable[[Client, Body], object],
        *,
        packer: Packer | None = None,
        spool: Spool | None = None,
        flush_interval_s: float = 0.5,
        max_memory_points: int = 1_000_000,
        relocate: Callable[[], bool] | None = None,
        say: Callable[[str], None] | None = None,
        tick: Callable[[Client], object] | None = None,
        tick_s: float = 0.0,
        first_tick_s: float = 0.0,
        min_backoff_s: float = 0.5,
        max_backoff_s: float = MAX_BACKOFF_S,
        name: str = "starforge-sender",
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.client_factory = client_factory
        self.post = post
        self.packer: Packer = packer or OneEach()
        self.spool = spool
        self.flush_interval_s = flush_interval_s
        self.max_memory_points = max_memory_points
        self.relocate = relocate
        self.say = say
        self.tick = tick
        self.tick_s = tick_s  # may change while running (the beacon names the heartbeat)
        self.min_backoff_s = min_backoff_s
        self.max_backoff_s = max_backoff_s
        self.stats = Stats()
        self.queue: collections.deque[Any] = collections.deque()
        self.wake = threading.Event()
        self.idle = threading.Event()  # set whenever everything queued so far was handled
        self.pending: list[Any] = []
        self.closing = False
        self.drained = False
        self.close_deadline = 0.0
        self.retry_at = 0.0
        self.backoff_s = min_backoff_s
        # The first tick goes out after ``first_tick_s`` (at once by default); after that, one
        # ``tick_s`` after the latest delivery of any kind: a delivered body is news enough.
        self.next_tick = time.monotonic() + first_tick_s if first_tick_s > 0 else 0.0
        self.unreachable_since: float | None = None
        self._client: Client | None = None

    # ---- the caller's side ----------------------------------------------------------------

    def put(self, item: Any) -> None:
        """Queue ``item`` for the next round (the hot path: one append, no lock)."""
        self.queue.append(item)
        if len(self.queue) & 4095 == 0:  # every 4096 items: wake the sender early
            self.wake.set()

    def send(self, item: Any) -> None:
        """Queue ``item`` and start a round now (rare, latency-sensitive items)."""
        self.queue.append(item)
        self.wake.set()

    def flush(self, timeout_s: float) -> bool:
        """Ask for a round now and wait until the queue is handled (True) or the timeout."""
        self.idle.clear()
        self.wake.set()
        return self.idle.wait(timeout_s)

    def close(self, timeout_s: float) -> bool:
        """Deliver what is left, spool what cannot be delivered within ``timeout_s``, stop.

        True when everything was delivered."""
        if not self.is_alive():
            return self.drained or not (self.queue or self.pending)
        self.close_deadline = time.monotonic() + timeout_s
        self.closing = True
        self.wake.set()
        self.join(timeout_s + 5.0)
        return self.drained

    # ---- the sender thread ------------------------------------------------------------------

    def run(self) -> None:
        try:
            while True:
                self.wake.wait(self._wait_s())
                self.wake.clear()
                closing = self.closing
                self._take()
                done = self._send_all(closing) and not self.queue
                if done:
                    self.idle.set()
                if not closing:
                    continue
                if done:
                    self.drained = True
                    return
                if time.monotonic() >= self.close_deadline:
                    self._take()
                    self._spill(self.pending)
                    return
                self.wake.wait(_CLOSE_RETRY_S)
        except Exception as exc:  # a bug must not reach the caller; keep what can be kept
            self.stats.last_error = f"sender stopped: {exc!r}"
            with contextlib.suppress(Exception):
                self._take()
                self._spill(self.pending)
        finally:
            if self._client is not None:
                with contextlib.suppress(Exception):
                    self._client.close()

    def _wait_s(self) -> float:
        now = time.monotonic()
        if self.retry_at > now:  # backing off: nothing is due before the retry
            return min(self.flush_interval_s, self.retry_at - now)
        wait = self.flush_interval_s
        if self.tick is not None and self.tick_s > 0:
            wait = min(wait, self.next_tick - now)
        return max(wait, 0.0)

    def _take(self) -> None:
        """Move queued items into packets, in order."""
        self.packer.take(self.pending, self.queue)
        self._limit_memory()

    def _limit_memory(self) -> None:
        held = sum(p.points for p in self.pending)
        if held <= self.max_memory_points or len(self.pending) < 2:
            return
        spill: list[Any] = []
        while self.pending and held > self.max_memory_points // 2 and len(self.pending) > 1:
            packet = self.pending.pop(0)
            held -= packet.points
            spill.append(packet)
        self._spill(spill)

    def _spill(self, packets: list[Any]) -> None:
        if not packets:
            return
        points = sum(p.points for p in packets)
        if self.spool is None:
            self.stats.last_error = f"lost {points} point(s): the server is unreachable"
        else:
            try:
                self.spool.write([p.body() for p in packets])
                self.stats.points_spooled += points
            except OSError as exc:
                self.stats.last_error = f"lost {points} point(s): cannot spool: {exc}"
        if packets is self.pending:
            self.pending = []

    def _send_all(self, closing: bool) -> bool:
        """Replay the spool, send pending packets, tick if due; False while the server is away."""
        if not closing and time.monotonic() < self.retry_at:
            return False
        if self.spool is not None and not self._replay():
            return False
        while self.pending:
            packet = self.pending[0]
            if not self._deliver(packet.body(), packet.points):
                return False
            self.pending.pop(0)
            self.stats.points_sent += packet.points
            if self.tick_s > 0:
                self.next_tick = time.monotonic() + self.tick_s
        ticking = self.tick is not None and self.tick_s > 0 and not closing
        if ticking and time.monotonic() >= self.next_tick:
            if not self._deliver(None, 0):
                return False
            self.next_tick = time.monotonic() + self.tick_s
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
                points = self.packer.points_of(body)
                if not self._deliver(body, points):
                    rest = "".join(ln + "\n" for ln in lines[i:])
                    with contextlib.suppress(OSError):
                        claimed.write_text(rest, encoding="utf-8")
                        os.replace(claimed, path)
                    return False
                self.stats.points_replayed += points
            with contextlib.suppress(OSError):
                claimed.unlink()
        return True

    def _deliver(self, body: Body | None, points: int) -> bool:
        """One try (``body`` None: a tick). True when it was taken or refused for good."""
        try:
            if self._client is None:
                self._client = self.client_factory()
            if body is None:
                assert self.tick is not None
                self.tick(self._client)
            else:
                self.post(self._client, body)
        except (ServerUnreachable, ServerError) as exc:
            self._failed(exc.message)
            return False
        except StarForgeError as exc:
            self.stats.points_rejected += points
            self.stats.last_error = f"the server refused {points} point(s): {exc.message}"
            if self.say is not None:
                self.say(f"the server refused a report: {exc.message}")
            return True
        except Exception as exc:
            self._failed(repr(exc))
            return False
        if body is not None:
            self.stats.batches_sent += 1
        self.backoff_s, self.retry_at = self.min_backoff_s, 0.0
        if self.unreachable_since is not None:
            away = time.monotonic() - self.unreachable_since
            self.unreachable_since = None
            if self.say is not None:
                self.say(f"reached the server again after {away:.1f} s")
        return True

    def _failed(self, why: str) -> None:
        self.stats.send_failures += 1
        self.stats.last_error = why
        if self.unreachable_since is None:
            self.unreachable_since = time.monotonic()
            if self.say is not None:
                self.say(f"cannot reach the server ({why}); reports are kept and retried")
        if self.relocate is not None and self.relocate():
            # The control plane restarted elsewhere: try the new address at once.
            if self._client is not None:
                with contextlib.suppress(Exception):
                    self._client.close()
            self._client = None
            self.backoff_s, self.retry_at = self.min_backoff_s, 0.0
            return
        self.retry_at = time.monotonic() + self.backoff_s
        self.backoff_s = min(self.backoff_s * 2, self.max_backoff_s)
