from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import Result

pytestmark = [pytest.mark.integration, pytest.mark.client]


def test_server_not_reachable_is_one_line_with_a_hint(
    sf: Callable[..., Result],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Port 9 (discard) on loopback: nothing listens there, the connection is refused at once.
    monkeypatch.setenv("STARFORGE_SERVER", "http://127.0.0.1:9")
    got = sf("job", "ls", cwd=tmp_path)
    assert got.code == 1
    assert "cannot reach the StarForge server at http://127.0.0.1:9" in got.err
    assert "Traceback" not in got.err
