"""The contract of ``starforge.report``: what training code can rely on.

Never raises, never waits for the network, silent without a run token, batches, flattens nested
metrics, drops non-finite values with one counted warning, keeps points while the server is away
and sends them later (from memory, or from the spool a finished process left), and ``finish``
drains. Runs against the real control plane in this process (see conftest.py).
"""

from __future__ import annotations

import json
import math
import os
import threading
from pathlib import Path

import httpx
import pytest

import starforge.report as report
from starforge.client.http import Client
from starforge.report.run import Run, Settings
from starforge.server.services.observability import metrics
from tests.server.factories import member

from .conftest import BASE, Server


def series(server: Server) -> dict[str, dict[int, float]]:
    view = metrics.series(server.rt, member("alice"), server.run_id, max_points=100_000)
    return {s.key: dict(zip(s.steps, s.values, strict=True)) for s in view.series}


class Weird:
    def __float__(self) -> float:
        raise RuntimeError("a tensor on a device that went away")


def test_without_a_run_token_every_call_is_a_silent_no_op(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for key in ("STARFORGE_TOKEN", "STARFORGE_ENDPOINT", "STARFORGE_RUN_ID"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("FORGE_OUT_DIR", str(tmp_path))
    threads = threading.active_count()
    report.init(hparams={"lr": 0.1})
    report.log({"loss": 1.0, "bad": math.nan}, step=3)
    report.log_hparams({"x": 1})
    assert report.flush() is True
    report.finish()
    assert threading.active_count() == threads  # no sender thread was started
    assert capsys.readouterr() == ("", "")  # not even the non-finite warning
    assert list(tmp_path.iterdir()) == []  # no spool either


def test_log_never_raises_whatever_training_code_passes(server: Server) -> None:
    run = server.run()
    for bad in (None, [1, 2], "loss", {"a": Weird()}, {"a": object()}, {1: 2.0}, {"t": [1.0]}):
        run.log(bad, step=1)  # type: ignore[arg-type]
    run.log({"ok": 1.0}, step="2")  # type: ignore[arg-type]
    run.log({"ok": 2.0}, step="not a step")  # type: ignore[arg-type]
    run.log_hparams(None)  # type: ignore[arg-type]
    run.finish()
    assert series(server) == {"1": {1: 2.0}, "ok": {2: 1.0}}


def test_nested_metrics_flatten_with_slashes_and_steps_count_on(server: Server) -> None:
    run = server.run()
    run.log({"train": {"loss": 2.0, "reward": {"mean": 0.5}}, "lr": 1e-3})  # step 0
    run.log({"train": {"loss": 1.0}})  # step 1
    run.log({"eval": {"acc": 0.7}}, step=10)
    run.log({"train": {"loss": 0.5}})  # step 11: the counter goes on from an explicit step
    run.finish()
    assert series(server) == {
        "eval/acc": {10: 0.7},
        "lr": {0: 1e-3},
        "train/loss": {0: 2.0, 1: 1.0, 11: 0.5},
        "train/reward/mean": {0: 0.5},
    }


def test_non_finite_values_are_dropped_with_one_warning_and_counted(
    server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    run = server.run()
    run.log({"loss": math.nan, "reward": 1.0}, step=0)
    run.log({"loss": math.inf}, step=1)
    run.log({"loss": "high"}, step=2)
    run.log({"loss": 0.5}, step=3)
    run.finish()
    err = capsys.readouterr().err
    assert err.count("non-finite value of 'loss' at step 0") == 1
    assert "dropped 2 non-finite and 1 non-numeric value(s) in all" in err
    assert (run.counts.nonfinite, run.counts.invalid) == (2, 1)
    assert series(server) == {"loss": {3: 0.5}, "reward": {0: 1.0}}


def test_points_go_in_batches_and_a_re_logged_step_replaces_the_old_value(
    server: Server,
) -> None:
    run = server.run(batch_points=100, flush_interval_s=60)
    for step in range(250):
        run.log({"loss": 1.0 / (step + 1), "reward": float(step)}, step=step)
    run.log({"loss": 42.0}, step=7)  # a resumed run re-logs step 7
    assert run.flush(timeout_s=30)
    run.finish()
    got = series(server)
    assert len(got["loss"]) == len(got["reward"]) == 250
    assert got["loss"][7] == 42.0
    assert run.stats.points_sent == 501
    assert 5 <= run.stats.batches_sent <= 8  # 100 points per batch, not one request per call


def test_log_returns_while_the_sender_is_stuck_in_a_request(server: Server) -> None:
    server.network.hold.clear()  # the next request hangs until released
    run = server.run(flush_interval_s=0.01)
    run.log({"loss": 1.0}, step=0)
    while server.network.requests == 0:
        threading.Event().wait(0.01)
    for step in range(1, 1000):  # would deadlock if log() waited for the sender
        run.log({"loss": 1.0}, step=step)
    server.network.hold.set()
    run.finish()
    assert len(series(server)["loss"]) == 1000


def test_points_logged_while_the_server_is_away_are_sent_when_it_is_back(
    server: Server,
) -> None:
    server.network.up = False
    run = server.run(flush_interval_s=0.05)
    for step in range(20):
        run.log({"loss": float(step)}, step=step)
    assert run.flush(timeout_s=0.5) is False
    assert run.stats.send_failures >= 1 and series(server) == {}
    server.network.up = True
    run.sender.retry_at = 0.0  # type: ignore[union-attr]  # skip the rest of the backoff
    assert run.flush(timeout_s=30)
    run.finish()
    assert sorted(series(server)["loss"]) == list(range(20))


def test_finish_spools_what_it_cannot_send_and_the_next_process_replays_it(
    server: Server,
) -> None:
    server.network.up = False
    first = server.run(flush_interval_s=0.05)
    first.log_hparams({"lr": 0.01})
    for step in range(30):
        first.log({"loss": float(step)}, step=step)
    first.finish(timeout_s=0.3)
    assert first.stats.points_spooled == 30
    spooled = list(server.spool.glob("spool-*.jsonl"))
    assert len(spooled) == 1

    server.network.up = True
    second = server.run(flush_interval_s=0.05)  # e.g. the run's next attempt
    second.log({"loss": 99.0}, step=30)
    second.finish()
    assert second.stats.points_replayed == 30
    assert sorted(series(server)["loss"]) == list(range(31))
    assert metrics.meta(server.rt, member("alice"), server.run_id).hparams == {"lr": 0.01}
    assert list(server.spool.iterdir()) == []


def test_the_memory_limit_moves_the_oldest_points_to_the_spool(server: Server) -> None:
    server.network.up = False
    run = server.run(flush_interval_s=0.01, batch_points=10, max_memory_points=40)
    for step in range(200):
        run.log({"loss": float(step)}, step=step)
    run.flush(timeout_s=0.5)
    assert run.stats.points_spooled > 0
    server.network.up = True
    run.sender.retry_at = 0.0  # type: ignore[union-attr]
    run.finish()
    assert sorted(series(server)["loss"]) == list(range(200))


def test_a_batch_the_server_refuses_is_dropped_not_retried_forever(server: Server) -> None:
    run = server.run(token="not-the-run-token")
    run.log({"loss": 1.0}, step=0)
    run.finish()
    assert run.stats.points_rejected == 1
    assert "not valid for run" in run.stats.last_error
    assert series(server) == {}


def test_hparams_and_metadata_are_merged_on_the_run(server: Server) -> None:
    run = server.run()
    run.started()
    run.log_hparams({"optim": {"lr": 0.1, "betas": (0.9, 0.99)}, "name": "tiny"})
    run.log_hparams({"optim": {"lr": 0.2}})
    run.finish()
    meta = metrics.meta(server.rt, member("alice"), server.run_id)
    assert meta.hparams == {"optim/lr": 0.2, "optim/betas": [0.9, 0.99], "name": "tiny"}
    assert meta.meta["sdk"].startswith("starforge.report")
    assert meta.meta["dropped_nonfinite"] == 0 and "finished_at" in meta.meta


def test_the_first_log_at_or_past_each_sync_step_returns_once_the_server_has_it(
    server: Server,
) -> None:
    run = server.run(sync_steps=(5, 10), flush_interval_s=3600)  # no timed flush meanwhile
    for step in range(4):
        run.log({"loss": 1.0}, step=step)
    run.log({"loss": 0.5}, step=6)  # past the rung at 5 (logging every other step)
    assert sorted(series(server)["loss"]) == [0, 1, 2, 3, 6]
    run.log({"loss": 0.4}, step=7)
    run.log({"loss": 0.3}, step=10)
    assert sorted(series(server)["loss"]) == [0, 1, 2, 3, 6, 7, 10]
    run.finish()


def test_settings_come_from_the_job_environment(tmp_path: Path) -> None:
    env = {
        "STARFORGE_ENABLED": "1",
        "STARFORGE_ENDPOINT": "http://127.0.0.1:9",
        "STARFORGE_RUN_ID": "r-0123456789",
        "STARFORGE_TOKEN": "tok",
        "FORGE_ATTEMPT": "3",
        "FORGE_OUT_DIR": str(tmp_path),
    }
    got = Settings.from_env(env)
    assert (got.enabled, got.attempt) == (True, 3)
    assert got.spool_dir == tmp_path / ".starforge" / "report-spool"
    assert got.sync_steps == ()
    rungs = Settings.from_env({**env, "STARFORGE_SYNC_STEPS": "300,100,x,"}).sync_steps
    assert rungs == (100, 300)
    assert not Settings.from_env({**env, "STARFORGE_ENABLED": "0"}).enabled
    assert not Settings.from_env({**env, "STARFORGE_TOKEN": ""}).enabled
    assert not Run(Settings.from_env({})).active


def test_only_global_rank_0_of_a_distributed_training_reports(tmp_path: Path) -> None:
    env = {
        "STARFORGE_ENDPOINT": "http://127.0.0.1:9",
        "STARFORGE_RUN_ID": "r-0123456789",
        "STARFORGE_TOKEN": "tok",
        "FORGE_OUT_DIR": str(tmp_path),
    }
    assert Settings.from_env({**env, "RANK": "0", "WORLD_SIZE": "2"}).enabled
    assert not Settings.from_env({**env, "RANK": "1", "WORLD_SIZE": "2"}).enabled


class Unreachable(httpx.BaseTransport):
    def handle_request(self, request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)


def test_a_restarted_control_plane_is_found_through_its_beacon(
    server: Server, tmp_path: Path
) -> None:
    (tmp_path / "control-plane.json").write_text(json.dumps({"url": BASE, "pid": 1}))
    settings = Settings(
        enabled=True,
        endpoint="http://127.0.0.1:1",  # where the server was before it restarted
        run_id=server.run_id,
        token=server.token,
        attempt=1,
        spool_dir=server.spool,
        storage_root=str(tmp_path),
    )

    def client() -> Client:
        transport = server.network if run.endpoint == BASE else Unreachable()
        return Client(run.endpoint, run_token=server.token, transport=transport)

    run = Run(settings, client_factory=client, flush_interval_s=0.05)
    run.log({"loss": 1.0}, step=0)
    run.finish()
    assert run.endpoint == BASE and run.stats.send_failures == 1
    assert series(server) == {"loss": {0: 1.0}}


def test_a_forked_child_inherits_a_silent_session(server: Server) -> None:
    run = server.run()
    pid = os.fork()
    if pid == 0:  # a data-loader worker, say
        silent = not run.active
        run.log({"child": 1.0}, step=0)
        run.finish()
        os._exit(0 if silent else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    run.log({"parent": 1.0}, step=0)
    run.finish()
    assert series(server) == {"parent": {0: 1.0}}
