"""The one background sender (``starforge.client.sender``) that the runner and the SDK share:
items keep their order, wait in memory while the server is away, go to the spool when the sender
must stop, and a later sender replays the spool. Against the in-process control plane of
conftest.py, with the network cut and restored.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from starforge.client.http import Client
from starforge.client.sender import Sender, Spool
from starforge.server.services.observability import metrics
from tests.server.factories import member

from .conftest import BASE, Server


def ingest(server: Server) -> Callable[[Client, dict[str, Any]], None]:
    def post(client: Client, body: dict[str, Any]) -> None:
        client.ingest(server.run_id, json.dumps(body).encode())

    return post


def sender(server: Server, **options: Any) -> Sender:
    def factory() -> Client:
        return Client(BASE, run_token=server.token, transport=server.network, timeout=5.0)

    return Sender(
        factory,
        ingest(server),
        spool=Spool(server.spool),
        flush_interval_s=0.05,
        min_backoff_s=0.05,
        **options,
    )


def step(n: int) -> dict[str, Any]:
    return {"attempt": 1, "steps": [{"step": n, "t": 0.0, "values": {"loss": float(n)}}]}


def losses(server: Server) -> dict[int, float]:
    view = metrics.series(server.rt, member("alice"), server.run_id, max_points=1000)
    found = {s.key: dict(zip(s.steps, s.values, strict=True)) for s in view.series}
    return found.get("loss", {})


def test_items_sent_while_the_server_is_down_are_spooled_and_replayed_after(
    server: Server,
) -> None:
    server.network.up = False
    first = sender(server)
    first.start()
    for n in range(5):
        first.send(step(n))
    assert first.flush(timeout_s=0.3) is False  # the server is away: nothing is lost, nothing sent
    assert first.close(timeout_s=0.3) is False
    assert first.stats.points_spooled == 5 and losses(server) == {}
    assert len(list(server.spool.glob("spool-*.jsonl"))) == 1

    server.network.up = True
    second = sender(server)  # a later process (the run's next attempt)
    second.start()
    second.send(step(5))
    assert second.close(timeout_s=30)
    assert second.stats.points_replayed == 5 and second.stats.points_sent == 1
    assert losses(server) == {n: float(n) for n in range(6)}
    assert list(server.spool.iterdir()) == []


def test_the_server_coming_back_gets_what_waited_in_memory_in_order(server: Server) -> None:
    server.network.up = False
    seen: list[int] = []
    post = ingest(server)

    def recording_post(client: Client, body: dict[str, Any]) -> None:
        post(client, body)
        seen.append(body["steps"][0]["step"])

    s = Sender(
        lambda: Client(BASE, run_token=server.token, transport=server.network, timeout=5.0),
        recording_post,
        flush_interval_s=0.05,
        min_backoff_s=0.05,
        max_backoff_s=0.1,
    )
    s.start()
    for n in range(10):
        s.send(step(n))
    assert s.flush(timeout_s=0.3) is False and s.stats.send_failures >= 1
    server.network.up = True
    assert s.close(timeout_s=30)
    assert seen == list(range(10)) and s.stats.points_spooled == 0


def test_ticks_go_out_while_idle_and_stop_at_close(server: Server) -> None:
    ticked = threading.Semaphore(0)
    s = sender(server, tick=lambda client: ticked.release(), tick_s=0.01)
    s.start()
    for _ in range(3):
        assert ticked.acquire(timeout=30)
    assert s.close(timeout_s=30)
    assert not s.is_alive()


def test_a_delivered_body_is_news_enough_and_the_first_tick_may_wait(server: Server) -> None:
    ticks: list[float] = []
    # As the runner's reporter: its first event goes out at once, its first beat one interval
    # later, and every delivery pushes the next beat back by an interval.
    s = sender(server, tick=lambda client: ticks.append(1.0), tick_s=3600, first_tick_s=3600)
    s.start()
    for n in range(3):
        s.send(step(n))
        assert s.flush(timeout_s=30)
    assert s.close(timeout_s=30)
    assert ticks == [] and sorted(losses(server)) == [0, 1, 2]
