"""Pending submissions: each `sf submit` a key of its own; a rerun of an unanswered one takes it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from starforge.client.pending import MAX_AGE_S, open_pending

BODY = {"spec": {"experiment": "c1", "commit": "a" * 40}, "manifest": {"files": []}}


def test_an_unanswered_submission_leaves_its_key_for_the_rerun(tmp_path: Path) -> None:
    first = open_pending(BODY, tmp_path)
    first.release()  # the invocation gave up without an answer
    again = open_pending(json.loads(json.dumps(BODY)), tmp_path)  # same content, new objects
    assert (again.key, again.reused, first.reused) == (first.key, True, False)


def test_an_identical_submission_in_flight_meanwhile_gets_a_key_of_its_own(
    tmp_path: Path,
) -> None:
    first = open_pending(BODY, tmp_path)  # its request has not been answered yet
    second = open_pending(BODY, tmp_path)
    assert second.key != first.key and not second.reused
    first.clear()
    second.clear()
    assert list((tmp_path / "pending").iterdir()) == []


def test_two_reruns_never_take_over_the_same_abandoned_key(tmp_path: Path) -> None:
    abandoned = open_pending(BODY, tmp_path)
    abandoned.release()
    one, other = open_pending(BODY, tmp_path), open_pending(BODY, tmp_path)
    assert one.key == abandoned.key and one.reused
    assert other.key != abandoned.key and not other.reused


def test_the_key_of_a_killed_invocation_is_taken_over_by_the_next(tmp_path: Path) -> None:
    crash = (
        "import os, sys; from pathlib import Path; from starforge.client.pending import "
        f"open_pending; p = open_pending({BODY!r}, Path(sys.argv[1])); print(p.key, flush=True); "
        "os.kill(os.getpid(), 9)"
    )
    done = subprocess.run(
        [sys.executable, "-c", crash, str(tmp_path)], capture_output=True, text=True
    )
    assert done.returncode == -9, done.stderr
    rerun = open_pending(BODY, tmp_path)
    assert (rerun.key, rerun.reused) == (done.stdout.strip(), True)


def test_an_answered_submission_frees_the_content_for_a_new_run(tmp_path: Path) -> None:
    first = open_pending(BODY, tmp_path)
    first.clear()
    second = open_pending(BODY, tmp_path)
    assert second.key != first.key and not second.reused


def test_other_content_gets_another_key(tmp_path: Path) -> None:
    other = {**BODY, "max_retries": 0}
    one = open_pending(BODY, tmp_path)
    one.release()
    assert open_pending(other, tmp_path).key != one.key


def test_a_stale_or_broken_record_is_not_reused_and_goes(tmp_path: Path) -> None:
    first = open_pending(BODY, tmp_path)
    first.path.write_text(json.dumps({"key": first.key, "at": time.time() - MAX_AGE_S - 1}))
    first.release()
    fresh = open_pending(BODY, tmp_path)
    assert fresh.key != first.key and not first.path.exists()
    fresh.path.write_text("{not json")
    fresh.release()
    assert not open_pending(BODY, tmp_path).reused and not fresh.path.exists()
