"""The eval gate: parsed from the config, refused on a metric the eval never produces, judged."""

from __future__ import annotations

import math

import pytest

from starforge.contract.errors import ConfigError
from starforge.steps.gate import Gate, check_gate_config, gate_of, judge


def test_no_eval_section_means_no_gate() -> None:
    assert gate_of({"learning_rate": 0.1}) is None
    assert check_gate_config("trl/sft", None) is None


@pytest.mark.parametrize(
    ("method", "metric"),
    [
        ("trl/sft", "loss"),
        ("trl/sft", "perplexity"),
        ("trl/dpo", "accuracy"),
        ("trl/grpo", "reward"),
        ("trl/grpo", "rewards/a_fraction"),
    ],
)
def test_a_gate_on_a_produced_metric_is_accepted(method: str, metric: str) -> None:
    gate = check_gate_config(method, {"eval": {"gate": {"metric": metric, "min": 0.5}}})
    assert gate == Gate(metric=metric, min=0.5)


@pytest.mark.parametrize(
    ("method", "metric", "says"),
    [
        ("trl/sft", "accuracy", "produces loss, perplexity, tokens"),
        ("trl/grpo", "rewards/", "rewards/<reward function>"),
        ("verl/grpo", "reward", "has no platform eval"),
    ],
)
def test_a_gate_on_a_metric_the_eval_does_not_produce_is_refused(
    method: str, metric: str, says: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        check_gate_config(method, {"eval": {"gate": {"metric": metric, "max": 1}}})
    assert raised.value.exit_code == 2
    assert f"metric {metric!r} is not produced by the eval of {method}" in str(raised.value)
    assert says in str(raised.value)


@pytest.mark.parametrize(
    "raw",
    [
        {"metric": "loss"},  # no bound
        {"metric": "loss", "min": 1, "max": 2},  # two bounds
        {"metric": "loss", "above": 1},  # a typo
        "loss >= 1",
    ],
)
def test_a_malformed_gate_is_a_config_error(raw: object) -> None:
    with pytest.raises(ConfigError, match=r"eval\.gate is invalid"):
        gate_of({"eval": {"gate": raw}})


def test_an_eval_section_that_is_not_a_mapping_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="must be a mapping"):
        gate_of({"eval": ["gate"]})


@pytest.mark.parametrize(
    ("gate", "value", "passed"),
    [
        (Gate(metric="reward", min=0.5), 0.5, True),
        (Gate(metric="reward", min=0.5), 0.49, False),
        (Gate(metric="loss", max=0.0), 0.0, True),
        (Gate(metric="loss", max=2.0), 2.5, False),
    ],
)
def test_judge_compares_the_metric_with_its_bound(gate: Gate, value: float, passed: bool) -> None:
    verdict = judge(gate, {gate.metric: value})
    assert verdict.passed is passed
    assert verdict.reason.endswith(f"{'passed' if passed else 'failed'}: {gate.metric} = {value:g}")


@pytest.mark.parametrize("metrics", [{}, {"reward": math.nan}])
def test_a_missing_or_nan_metric_fails_the_gate(metrics: dict[str, float]) -> None:
    verdict = judge(Gate(metric="reward", min=0.0), metrics)
    assert not verdict.passed and "no finite reward" in verdict.reason
