from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from starforge.cli import connect
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


def test_the_module_server_runs_as_a_process_of_its_own_started_as_sf_server_start_starts_it(
    sf: Callable[..., Result], tmp_path: Path
) -> None:
    # The suite's other packages fork their servers from a preloaded python; this package's must
    # be what a user gets: a process whose command line is the server's own.
    assert sf("job", "ls", cwd=tmp_path).code == 0  # starts the module's server when none runs
    found = connect.running_embedded()
    assert found is not None
    cmdline = Path(f"/proc/{found[1]}/cmdline").read_bytes().split(b"\0")
    assert cmdline[1:3] == [b"-m", b"starforge.server"], cmdline
