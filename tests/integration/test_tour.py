"""The small things a researcher meets on the hands-on tour, through `sf` and a real server: a
drain's verdict said once, `sf job ls` at 80 columns (run ids whole, a reason on one line) and
with a filter nothing matches, paused runs in `sf status`, a lower-case secret name printed whole,
and the embedded server coming back on its port after a restart."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from starforge.cli.main import main
from starforge.client import config
from starforge.project.lab import Lab
from tests.conftest import Result
from tests.integration.conftest import wait_for
from tests.integration.test_lifecycle import FINAL, act, submit_custom, wait_for_log

pytestmark = pytest.mark.integration


def sf_at(columns: int, *args: str) -> str:
    """`sf ARGS` as a fresh process on a terminal ``columns`` wide (rich reads COLUMNS)."""
    env = {**os.environ, "COLUMNS": str(columns), "STARFORGE_WARM_CLIENT": "0"}
    done = subprocess.run(
        [sys.executable, "-m", "starforge.cli.main", *args],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def drained(sf: Callable[..., Result]) -> Iterator[Result]:
    """A maintenance drain (its answer) for the test; resumed at its end."""
    got = sf("admin", "maintenance", "drain", "--note", "driver upgrade on every node " * 3)
    assert got.code == 0, got.err
    try:
        yield got
    finally:
        assert sf("admin", "maintenance", "resume").code == 0


def test_a_drain_says_its_verdict_once_and_sf_job_ls_keeps_ids_whole_at_80_columns(
    sf: Callable[..., Result], custom_lab: Callable[..., Lab], drained: Result
) -> None:
    assert "safe to restart: no run holds resources" in drained.out
    assert "safe to restart: safe to restart" not in drained.out
    status = sf("admin", "maintenance", "status")
    assert status.out.count("safe to restart") == 1, status.out
    lab = custom_lab()
    held = [submit_custom(sf, lab) for _ in range(2)]  # queued: the drain holds them

    table = sf_at(80, "job", "ls", "--limit", "2").splitlines()
    assert len(table) == 3, "\n".join(table)  # the header and one line per run
    for run_id, line in zip(held[::-1], table[1:], strict=True):
        assert line.split()[0] == run_id  # never cut
        assert "maintenance (driver upgrade" in line and line.rstrip().endswith("…")
    whole: Any = sf("job", "status", held[0], "--json").json()
    assert whole["reason"].endswith("the scheduler starts no run until an admin resumes")

    none = sf("job", "ls", "--status", "running")
    assert none.code == 0 and none.out.strip() == "no run matches --status running"
    for run_id in held:
        sf("job", "stop", run_id)


def test_sf_status_lists_paused_runs_with_why(
    sf: Callable[..., Result], custom_lab: Callable[..., Lab]
) -> None:
    lab = custom_lab(steps=400, step_seconds=0.1)
    run_id = submit_custom(sf, lab)
    wait_for_log(sf, run_id, r"step 2/")
    act(sf, "pause", run_id)
    assert wait_for(sf, run_id, {"paused", *FINAL})["status"] == "paused"
    shown = sf("status")
    assert shown.code == 0 and "your paused runs" in shown.out, shown.out
    assert run_id in shown.out.split("your paused runs", 1)[1]
    mine: Any = sf("status", "--json").json()
    [paused] = mine["me"]["paused"]
    assert paused["run_id"] == run_id and paused["reason"].startswith("paused by user")
    assert run_id not in {r["run_id"] for r in mine["me"]["active"] + mine["me"]["queued_runs"]}
    sf("job", "stop", run_id)


def test_a_lower_case_secret_name_is_printed_whole(
    sf: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("value-of-a-lower-case-secret\n"))
    got = sf("secret", "set", "lower_case")
    assert got.code == 0, got.err
    assert "secrets: [lower_case]" in " ".join(got.out.split()), got.out
    assert sf("secret", "rm", "lower_case").code == 0


def test_the_embedded_server_comes_back_on_its_port_when_it_is_free(server_home: Path) -> None:
    # The module's own server (on PostgreSQL a second home would share its database and take
    # over its local user's token).
    first = server_url(server_home)
    assert main(["server", "stop"]) == 0
    assert main(["status", "--json"]) == 0  # starts the embedded server again
    assert server_url(server_home) == first  # links printed before the restart still work
    assert main(["server", "stop"]) == 0
    port = int(first.rsplit(":", 1)[1])
    with socket.create_server(("127.0.0.1", port)):  # someone else took the port meanwhile
        assert main(["server", "start"]) == 0
        assert server_url(server_home) != first


def server_url(home: Path) -> str:
    info = config.read_server_file(home)
    assert info is not None
    return str(info["url"])
