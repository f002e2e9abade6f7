"""The suite's property tests run under the CI profile that tests/conftest.py loads."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.skipif(
    os.environ.get("HYPOTHESIS_PROFILE", "ci") != "ci", reason="another profile was asked for"
)


def test_property_tests_have_no_deadline_and_no_too_slow_check() -> None:
    assert settings.default.deadline is None
    assert HealthCheck.too_slow in settings.default.suppress_health_check


@given(st.integers())
def test_a_given_test_without_its_own_settings_inherits_the_profile(n: int) -> None:
    assert settings().deadline is None
    assert isinstance(n, int)
