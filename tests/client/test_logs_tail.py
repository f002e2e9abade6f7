"""`sf job logs RUN -n N --no-follow`: the last lines, read from the end of the log."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from starforge.cli import logs as cli_logs
from tests.server.factories import run_row, running_run

from .conftest import Counting, alice


def test_logs_n_no_follow_prints_the_last_lines_and_asks_only_for_the_tail(
    app_transport: httpx.BaseTransport, capsys: pytest.CaptureFixture[str]
) -> None:
    rt = app_transport.app.state.runtime  # type: ignore[attr-defined]
    run_id = running_run(rt)
    lines = [f"step {i}\n" for i in range(300_000)]  # ~3 MB: several answers from the start
    Path(run_row(rt, run_id).attempts[-1].log_path).write_text("".join(lines))
    counting = Counting(app_transport)
    with alice(counting) as client:
        cli_logs.tail_and_follow(client, client.get_run(run_id), 2, follow=False)
    assert capsys.readouterr().out == "step 299998\nstep 299999\n"
    assert counting.calls["GET logs"] == 2  # the tail, then "nothing more"
