"""Observability modes: what a method declares, what an experiment may opt into, the URL."""

from __future__ import annotations

import pytest

from starforge.contract.errors import ConfigError, MissingInput, UsageError
from starforge.contract.observability import check_url, mode_of

OPT_IN = {"starforge": {"observability": "platform"}}


def test_an_external_method_is_external_unless_its_experiment_opts_into_the_platform() -> None:
    assert mode_of("external", {}) == "external"
    assert mode_of("external", None) == "external"
    assert mode_of("external", OPT_IN) == "platform"
    assert mode_of("platform", {"starforge": {"observability": "external"}}) == "platform"


@pytest.mark.parametrize(
    "config", [{"starforge": "platform"}, {"starforge": {"observability": "wandb"}}]
)
def test_a_malformed_opt_in_names_the_key_and_the_choices(config: dict[str, object]) -> None:
    with pytest.raises(ConfigError) as err:
        mode_of("external", config)
    assert "starforge" in err.value.message


def test_external_runs_need_an_http_url_and_platform_runs_refuse_one() -> None:
    check_url("external", "https://wandb.ai/team/project", "custom/custom")
    check_url("platform", "", "trl/grpo")
    with pytest.raises(MissingInput) as missing:
        check_url("external", "", "custom/custom")
    assert "observability: platform" in (missing.value.hint or "")
    with pytest.raises(UsageError, match="not an http"):
        check_url("external", "wandb.ai/team", "custom/custom")
    with pytest.raises(UsageError, match="not accepted"):
        check_url("platform", "https://wandb.ai/team/project", "trl/grpo")
