"""The runner sends what its job spooled, after the job and before its exit: retried while the
server is away, left for the server when it stays away or refuses the job's token.

Against the real control plane in this process (see tests/report/conftest.py: real routes,
services and SQLite; only the network between them is in the test's hands). The spool is written
by the report SDK itself, with the server unreachable, in the run's own folder.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx

from starforge.client.http import Client
from starforge.contract.env import Binding
from starforge.contract.layout import RunLayout
from starforge.report.run import Run
from starforge.report.run import Settings as ReportSettings
from starforge.runner.spooldrain import drain
from starforge.server.services.observability import metrics
from tests.report.conftest import (  # noqa: F401  (fixtures)
    BASE,
    Server,
    _clean_env,
    database_url,
    databases,
    executor,
    server,
    settings,
)
from tests.server.factories import binding, member, report, run_row

STEPS = 300


class Flaky(httpx.BaseTransport):
    """The server's network, refusing the first ``fail`` requests (a server still restarting)."""

    def __init__(self, to: Server, fail: int) -> None:
        self.server, self.fail, self.refused = to, fail, 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.refused < self.fail:
            self.refused += 1
            raise httpx.ConnectError("connection refused", request=request)
        return self.server.network.handle_request(request)


def spooled_job(server: Server, steps: int = STEPS) -> Binding:  # noqa: F811
    """The run's binding after its job logged ``steps`` steps while the server was away."""
    node = Binding.read(binding(server.rt, server.run_id))
    server.network.up = False
    job = Run(
        ReportSettings(
            enabled=True,
            endpoint=BASE,
            run_id=server.run_id,
            token=node.job_token,
            attempt=1,
            spool_dir=RunLayout(Path(node.run_dir)).report_spool,
        ),
        client_factory=lambda: Client(BASE, run_token=node.job_token, transport=server.network),
        flush_interval_s=0.05,
        batch_points=200,  # several bodies
    )
    for step in range(steps):
        job.log({"loss": 1.0 / (step + 1), "acc": step / steps}, step=step)
    job.finish(timeout_s=0.2)
    assert job.stats.points_spooled == 2 * steps
    server.network.up = True
    return node


def through(transport: httpx.BaseTransport, node: Binding) -> Callable[[str], Client]:
    return lambda url: Client(BASE, run_token=node.job_token, transport=transport)


def stored(server: Server) -> dict[str, dict[int, float]]:  # noqa: F811
    view = metrics.series(server.rt, member("alice"), server.run_id, max_points=100_000)
    return {s.key: dict(zip(s.steps, s.values, strict=True)) for s in view.series}


def expected(steps: int = STEPS) -> dict[str, dict[int, float]]:
    return {
        "acc": {s: s / steps for s in range(steps)},
        "loss": {s: 1.0 / (s + 1) for s in range(steps)},
    }


def test_the_spool_is_sent_once_the_server_answers_and_then_removed(
    server: Server,  # noqa: F811
) -> None:
    node = spooled_job(server)
    said: list[str] = []
    flaky = Flaky(server, fail=3)
    done = drain(node, said.append, limit=60, client_factory=through(flaky, node), min_backoff_s=0)
    assert (done.points_sent, done.tries_failed, done.stopped) == (2 * STEPS, 3, "")
    assert stored(server) == expected()
    assert said == [f"sent {2 * STEPS} point(s) the job had spooled"]
    assert list(RunLayout(Path(node.run_dir)).report_spool.iterdir()) == []


def test_a_server_still_away_leaves_the_spool_to_the_end_of_the_run_which_stores_it(
    server: Server,  # noqa: F811
) -> None:
    node = spooled_job(server)
    folder = RunLayout(Path(node.run_dir)).report_spool
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    server.network.up = False
    said: list[str] = []
    done = drain(
        node, said.append, limit=0.2, client_factory=through(server.network, node),
        min_backoff_s=0.05,
    )  # fmt: skip
    assert done.points_sent == 0 and done.tries_failed >= 1
    assert "the server did not take them in time" in said[0]
    assert f"spool file(s) stay in {folder} for the server" in said[0]
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # untouched
    assert stored(server) == {}

    # The runner reports the exit; the attempt's end takes the spool, and removes it after.
    report(server.rt, server.run_id, "exited", exit_code=0)
    assert run_row(server.rt, server.run_id).status == "succeeded"
    assert stored(server) == expected()
    assert list(folder.iterdir()) == []


def test_a_token_the_server_refuses_stops_the_drain_and_keeps_the_spool(
    server: Server,  # noqa: F811
) -> None:
    node = spooled_job(server)
    folder = RunLayout(Path(node.run_dir)).report_spool
    stale = node.model_copy(update={"job_token": "stale-token-of-an-older-attempt"})
    said: list[str] = []
    done = drain(stale, said.append, limit=60, client_factory=through(server.network, stale))
    assert done.points_sent == 0 and done.tries_failed == 0
    assert "the server refuses the job's token" in said[0]
    assert len(list(folder.iterdir())) == done.files >= 1
    assert stored(server) == {}


def test_a_node_other_than_0_or_an_empty_spool_sends_nothing(server: Server) -> None:  # noqa: F811
    node = Binding.read(binding(server.rt, server.run_id))
    said: list[str] = []
    assert drain(node, said.append, limit=60).files == 0  # nothing spooled: not even a client
    node = spooled_job(server)
    other = node.model_copy(update={"node_rank": 1})
    assert drain(other, said.append, limit=60).files == 0
    assert said == []
