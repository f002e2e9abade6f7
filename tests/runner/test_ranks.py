"""SIGTERM for a launcher's ranks, which live in sessions of their own (runner/ranks.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from starforge.runner import ranks

# A rank as torchrun starts it: in a session of its own, SIGTERM ignored (its launcher's), until
# its training installs a handler ("go"), which says so ("ready") and answers TERM with 143.
RANK = """
import os, pathlib, signal, sys, time
d = pathlib.Path(sys.argv[1])
while not (d / "go").exists():
    time.sleep(0.01)
def on_term(*_):
    (d / "got").write_text(str(os.getpid()))
    sys.exit(143)
signal.signal(signal.SIGTERM, on_term)
(d / "ready").write_text("1")
while True:
    time.sleep(0.05)
"""
LAUNCHER = """
import subprocess, sys
rank = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], start_new_session=True)
sys.exit(1 if rank.wait() else 0)  # torchrun: 1 when a rank failed
"""


def wait_until(check: Callable[[], bool], limit_s: float = 60.0) -> None:
    deadline = time.monotonic() + limit_s
    while not check():
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(0.01)


def test_a_rank_that_still_ignores_sigterm_is_told_once_its_handler_is_in_place(
    tmp_path: Path,
) -> None:
    ignore_term = ["sh", "-c", 'trap "" TERM; exec "$@"', "launcher"]
    launcher = subprocess.Popen([*ignore_term, sys.executable, "-c", LAUNCHER, RANK, tmp_path])
    try:
        wait_until(lambda: len(ranks.descendants(launcher.pid)) == 1)
        [rank] = ranks.descendants(launcher.pid)
        wait_until(lambda: ranks.ignores_term(rank))
        forwarder = ranks.TermForwarder(launcher.pid)
        forwarder.start()
        (tmp_path / "go").write_text("1")  # the rank's own handler comes now
        code = launcher.wait(timeout=60)
        forwarder.stop()
        assert (tmp_path / "got").read_text() == str(rank)  # the rank heard it, not lost
        assert code == 1  # the launcher ignored SIGTERM and reported its rank's failure
        assert ranks.exit_code(code, launcher="torchrun", terminating=True) == 143
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()


def test_torchruns_failure_is_the_signals_exit_only_after_a_sigterm() -> None:
    assert ranks.exit_code(1, launcher="torchrun", terminating=True) == 143
    assert ranks.exit_code(1, launcher="torchrun", terminating=False) == 1
    assert ranks.exit_code(1, launcher="", terminating=True) == 1
    assert ranks.exit_code(0, launcher="torchrun", terminating=True) == 0
