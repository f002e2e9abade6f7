"""The catalog's training tests share one preloaded python per test process (preloaded.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.catalog import preloaded


@pytest.fixture(autouse=True, scope="session")
def _preloaded_python_ends_with_the_session() -> Iterator[None]:
    yield
    preloaded.close_shared()
