"""``starforge.report.TrainerCallback``: what a Hugging Face / TRL trainer's logs become.

The trainer is played by the calls it makes on its callbacks (the real TRL path runs in the
integration test with training); the server side is the real control plane (see conftest.py).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Any

import pytest

from starforge.server.services.observability import metrics
from tests.server.factories import member

from .conftest import Server

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="needs the [train] extra"
)


@dataclass
class Args:
    learning_rate: float = 0.02
    max_steps: int = 3
    report_to: list[str] = field(default_factory=lambda: ["none"])

    def to_dict(self) -> dict[str, Any]:
        return {"learning_rate": self.learning_rate, "max_steps": self.max_steps}


@dataclass
class State:
    global_step: int = 0
    is_world_process_zero: bool = True
    log_history: list[dict[str, Any]] = field(default_factory=list)


def test_trainer_logs_become_curves_at_the_global_step_and_the_summary_metadata(
    server: Server,
) -> None:
    from starforge.report import TrainerCallback

    run = server.run()
    callback = TrainerCallback(run)
    args, state = Args(), State()
    callback.on_train_begin(args, state, None)
    for step in (1, 2, 3):
        state.global_step = step
        callback.on_log(args, state, None, logs={"loss": 1.0 / step, "reward": step / 3})
    callback.on_log(args, state, None, logs={"eval_loss": 0.4})
    callback.on_log(args, state, None, logs={"train_runtime": 1.5, "train_loss": 0.6})
    callback.on_train_end(args, state, None)
    run.finish()

    view = metrics.series(server.rt, member("alice"), server.run_id)
    got = {s.key: (s.steps, s.values) for s in view.series}
    assert got["loss"] == ([1, 2, 3], [1.0, 0.5, 1.0 / 3])
    assert got["reward"][0] == [1, 2, 3]
    assert got["eval_loss"] == ([3], [0.4])
    assert "train_runtime" not in got  # the summary is metadata, not a one-point curve
    meta = metrics.meta(server.rt, member("alice"), server.run_id)
    assert meta.hparams == {"learning_rate": 0.02, "max_steps": 3}
    assert meta.meta["summary"] == {"train_runtime": 1.5, "train_loss": 0.6}


def test_only_the_main_process_reports(server: Server) -> None:
    from starforge.report import TrainerCallback

    run = server.run()
    callback = TrainerCallback(run)
    state = State(global_step=1, is_world_process_zero=False)
    callback.on_train_begin(Args(), state, None)
    callback.on_log(Args(), state, None, logs={"loss": 1.0})
    run.finish()
    assert metrics.series(server.rt, member("alice"), server.run_id).series == []
    assert metrics.meta(server.rt, member("alice"), server.run_id).hparams == {}


def test_a_resumed_training_sends_its_checkpoints_history_again(server: Server) -> None:
    """The attempt before died right after logging step 2 (its point never left the process);
    the checkpoint at step 2 has it in its log history, and the resumed attempt sends it."""
    from starforge.report import TrainerCallback

    run = server.run()
    callback = TrainerCallback(run)
    history = [
        {"loss": 1.0, "epoch": 0.5, "step": 1},
        {"loss": 0.5, "epoch": 1.0, "step": 2},
        {"train_runtime": 9.0, "step": 2},  # an earlier attempt's summary stays metadata
    ]
    state = State(global_step=2, log_history=history)
    callback.on_train_begin(Args(), state, None)
    state.global_step = 3
    callback.on_log(Args(), state, None, logs={"loss": 0.25})
    run.finish()
    got = {
        s.key: (s.steps, s.values)
        for s in metrics.series(server.rt, member("alice"), server.run_id).series
    }
    assert got["loss"] == ([1, 2, 3], [1.0, 0.5, 0.25])
    assert "train_runtime" not in got
