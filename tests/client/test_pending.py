"""Pending submissions: the key a rerun of an unanswered ``sf submit`` reuses."""

from __future__ import annotations

import json
import time
from pathlib import Path

from starforge.client.pending import MAX_AGE_S, open_pending

BODY = {"spec": {"experiment": "c1", "commit": "a" * 40}, "manifest": {"files": []}}


def test_an_unanswered_submission_leaves_its_key_for_the_rerun(tmp_path: Path) -> None:
    first = open_pending(BODY, tmp_path)
    again = open_pending(json.loads(json.dumps(BODY)), tmp_path)  # same content, new objects
    assert (again.key, again.reused, first.reused) == (first.key, True, False)


def test_an_answered_submission_frees_the_content_for_a_new_run(tmp_path: Path) -> None:
    first = open_pending(BODY, tmp_path)
    first.clear()
    second = open_pending(BODY, tmp_path)
    assert second.key != first.key and not second.reused


def test_other_content_gets_another_key(tmp_path: Path) -> None:
    other = {**BODY, "max_retries": 0}
    assert open_pending(BODY, tmp_path).key != open_pending(other, tmp_path).key


def test_a_stale_or_broken_record_is_not_reused(tmp_path: Path) -> None:
    first = open_pending(BODY, tmp_path)
    first.path.write_text(json.dumps({"key": first.key, "at": time.time() - MAX_AGE_S - 1}))
    assert open_pending(BODY, tmp_path).key != first.key
    first.path.write_text("{not json")
    assert not open_pending(BODY, tmp_path).reused
