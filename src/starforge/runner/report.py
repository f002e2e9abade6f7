"""Lifecycle reports from a runner to the control plane, heartbeats, and the records on disk.

A runner never dies, and never waits to train, because the server is away. Events go through the
platform's one background sender (:class:`starforge.client.sender.Sender`): delivered in order,
retried with backoff for as long as the runner lives, and whatever is still undelivered when the
runner closes is spooled beside the node's records (``RunLayout.events_spool``). Between events
the sender's tick sends a heartbeat every ``heartbeat_s``. When a delivery fails, the reporter
re-reads the control plane's beacon (rewritten by every server start), so a runner follows a
server that restarted on another port, at the heartbeat the server asks for.

The server's answer fences the runner: an event or heartbeat it does not accept (or a token it
no longer knows, because a newer attempt took over) means this attempt is over, and the runner
is told through ``on_fenced`` so it stops its training: an attempt never has two live runners.

Two records let a server that missed everything catch up from the run dir: the runner record
(pid and process group, written first) and the exit record (written before the final report).
Both go through the one atomic writer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starforge.client import trust
from starforge.client.http import Client
from starforge.client.sender import Body, Sender, Single, Spool, read_beacon
from starforge.contract.api import MAX_LIFECYCLE_BATCH, LifecycleBatch, LifecycleEvent
from starforge.contract.env import Binding
from starforge.contract.errors import Forbidden, NotFound
from starforge.contract.states import EndReason
from starforge.runner.records import (  # noqa: F401  (the runner's records, re-exported)
    exit_record_path,
    runner_record_path,
    spool_dir,
    write_exit_record,
    write_runner_record,
)

DEFAULT_HEARTBEAT_S = 5.0
MAX_BACKOFF_S = 2.0


def client_for(binding: Binding, url: str, timeout: float = 10.0) -> Client:
    """A client of the control plane with the runner's token, trusting the server's CA."""
    return Client(
        url,
        run_token=binding.run_token,
        timeout=timeout,
        ca_pem=binding.tls_ca,
        ca_setting=trust.SERVER_SETTING,
    )


class EventBatches:
    """Events queued together go out in one request (a batch, in order; one event alone as
    itself): a quick start's ``starting`` and ``running`` cost the server one transaction."""

    def take(self, pending: list[Any], queue: Any) -> None:
        while queue:
            events = [queue.popleft() for _ in range(min(len(queue), MAX_LIFECYCLE_BATCH))]
            body = events[0] if len(events) == 1 else {"events": events}
            pending.append(Single(body, points=len(events)))

    def points_of(self, body: Body) -> int:
        return len(body["events"]) if "events" in body else 1


class Reporter:
    """The runner's courier: events in order, heartbeats, following the beacon, and fencing."""

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
        heartbeat_s = beacon.heartbeat_s if beacon else DEFAULT_HEARTBEAT_S
        self.sender = Sender(
            self._client,
            self._post,
            packer=EventBatches(),
            spool=Spool(spool_dir(binding)),
            relocate=self._relocate,
            say=log,
            tick=self._heartbeat,
            tick_s=heartbeat_s,
            # Every event proves the runner alive (the server stamps its beat with it), and
            # "starting" goes out at once: the first heartbeat is due one interval later.
            first_tick_s=heartbeat_s,
            min_backoff_s=0.2,
            max_backoff_s=min(MAX_BACKOFF_S, heartbeat_s),
            name="starforge-reporter",
        )

    @property
    def heartbeat_s(self) -> float:
        return self.sender.tick_s

    # ---- the runner's side ----------------------------------------------------------------

    def start(self) -> None:
        if self.enabled:
            self.sender.start()

    def send(
        self,
        event: str,
        *,
        exit_code: int | None = None,
        end_reason: EndReason | None = None,
        message: str = "",
        at_once: bool = True,
    ) -> None:
        """Queue an event; it is delivered in order, in the background. ``at_once=False``: with
        the sender's next round (within its flush interval), so that it may share a request
        with the event that follows it."""
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
        if at_once:
            self.sender.send(body.model_dump(mode="json"))
        else:
            self.sender.put(body.model_dump(mode="json"))

    def deliver(self) -> None:
        """Send what is queued now (events queued with ``at_once=False``), without waiting."""
        if self.enabled:
            self.sender.wake.set()

    def close(self, patience_s: float = 60.0) -> bool:
        """Wait up to ``patience_s`` for every event to be delivered, then stop; True if so."""
        if not self.enabled:
            return True
        drained = self.sender.close(patience_s)
        if not drained:
            self._log("the server did not answer; it will read this attempt's exit record instead")
        return drained

    # ---- called from the sender's thread ----------------------------------------------------

    def _client(self) -> Client:
        return client_for(self.binding, self.url)

    def _post(self, client: Client, body: dict[str, Any]) -> None:
        # A spooled body may be another runner version's (read leniently, like every record).
        events = [LifecycleEvent.read(e) for e in body.get("events", [body])]
        run_id = self.binding.run_id
        try:
            if len(events) == 1:
                accepted = [client.lifecycle(run_id, events[0])]
            else:
                accepted = client.lifecycle_batch(run_id, LifecycleBatch(events=events))
        except (Forbidden, NotFound) as exc:  # a newer attempt holds the run's token
            self._fence(f"the server refuses this attempt's reports ({exc.message})")
            return
        if any(not ok and ev.event != "exited" for ev, ok in zip(events, accepted, strict=True)):
            self._fence(f"the server says attempt {self.binding.attempt} is over")

    def _heartbeat(self, client: Client) -> None:
        if not self.fenced:
            event = LifecycleEvent(
                attempt=self.binding.attempt, node_rank=self.binding.node_rank, event="heartbeat"
            )
            self._post(client, event.model_dump(mode="json"))

    def _relocate(self) -> bool:
        """After a failed delivery: follow the beacon; True when the server moved."""
        beacon = read_beacon(self.binding.storage_root)
        if beacon is None:
            return False
        self.sender.tick_s = beacon.heartbeat_s
        if not beacon.url or beacon.url == self.url:
            return False
        self._log(f"the server moved to {beacon.url}")
        self.url = beacon.url
        return True

    def _fence(self, why: str) -> None:
        if self.fenced:
            return
        self.fenced = True
        self._log(f"{why}; stopping")
        if self._on_fenced is not None:
            self._on_fenced(why)
