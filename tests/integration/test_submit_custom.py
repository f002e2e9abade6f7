"""The submission path end to end with a real server, real git and real runners (custom jobs)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from starforge.project.lab import Lab
from tests.conftest import Result, git
from tests.integration.conftest import wait_for

pytestmark = pytest.mark.integration
IMAGE = "registry.example/train:v1"


def submit(sf: Callable[..., Result], root: Path, *extra: str, exp: str = "c1") -> Result:
    return sf("submit", exp, "--profile", "h200:1", "--image", IMAGE, "--json", *extra, cwd=root)


def run_ids(sf: Callable[..., Result]) -> set[str]:
    runs = sf("job", "ls", "--json", "--limit", "500").json()
    assert isinstance(runs, list)
    return {r["run_id"] for r in runs}


def test_a_submitted_run_is_queued_dispatched_run_and_succeeds(
    sf: Callable[..., Result],
    custom_lab: Callable[..., Lab],
) -> None:
    lab = custom_lab(steps=3)
    got = submit(sf, lab.root)
    assert got.code == 0, got.err
    body = got.json()
    assert isinstance(body, dict)
    run_id = str(body["run_id"])
    view = wait_for(sf, run_id, {"succeeded", "failed"})
    assert view["status"] == "succeeded"
    assert view["exit_code"] == 0
    assert view["git_commit"] == git(lab.root, "rev-parse", "HEAD").strip()
    events = [e["dst"] for e in view["events"]]  # type: ignore[union-attr, index]
    assert events == ["queued", "starting", "running", "succeeded"]


def test_submit_follow_prints_the_log_and_ends_with_the_run(
    sf: Callable[..., Result],
    custom_lab: Callable[..., Lab],
) -> None:
    lab = custom_lab(steps=4)
    got = sf("submit", "c1", "--profile", "h200:1", "--image", IMAGE, "--follow", cwd=lab.root)
    assert got.code == 0, got.err
    assert "step 4/4" in got.out
    assert "succeeded" in got.err


def test_resubmitting_an_unchanged_experiment_uploads_nothing(
    sf: Callable[..., Result],
    custom_lab: Callable[..., Lab],
) -> None:
    lab = custom_lab(steps=1)
    first = submit(sf, lab.root).json()
    second = submit(sf, lab.root).json()
    assert isinstance(first, dict) and isinstance(second, dict)
    assert first["files_uploaded"] > 0  # type: ignore[operator]
    assert (second["files_uploaded"], second["bytes_uploaded"]) == (0, 0)
    assert second["files_skipped"] == first["files_uploaded"] + first["files_skipped"]  # type: ignore[operator]
    assert second["run_id"] != first["run_id"]


def test_dirty_tree_is_refused_without_allow_dirty_and_creates_nothing(
    sf: Callable[..., Result],
    custom_lab: Callable[..., Lab],
) -> None:
    lab = custom_lab(steps=1)
    before = run_ids(sf)
    (lab.root / "experiments" / "c1" / "train.sh").write_text("echo edited\n")
    refused = submit(sf, lab.root)
    assert refused.code == 2
    assert "uncommitted changes in experiments/c1/train.sh" in refused.err
    assert run_ids(sf) == before
    accepted = submit(sf, lab.root, "--allow-dirty")
    assert accepted.code == 0, accepted.err
    run_id = str(accepted.json()["run_id"])  # type: ignore[index]
    view = wait_for(sf, run_id, {"succeeded", "failed"})
    assert view["git_dirty"] is True
    log = sf("job", "logs", run_id, "--no-follow", "-n", "0").out
    assert "edited" in log


def test_secret_file_is_refused_even_with_allow_dirty(
    sf: Callable[..., Result],
    custom_lab: Callable[..., Lab],
) -> None:
    lab = custom_lab(steps=1)
    before = run_ids(sf)
    (lab.root / "experiments" / "c1" / "hf_token.txt").write_text("hf_secret")
    git(lab.root, "add", "-f", "experiments/c1/hf_token.txt")
    got = submit(sf, lab.root, "--allow-dirty")
    assert got.code == 2
    assert "experiments/c1/hf_token.txt" in got.err
    assert run_ids(sf) == before


def test_stop_on_a_running_job_terminates_it(
    sf: Callable[..., Result],
    custom_lab: Callable[..., Lab],
) -> None:
    lab = custom_lab(steps=2000, step_seconds=0.1)
    run_id = str(submit(sf, lab.root).json()["run_id"])  # type: ignore[index]
    wait_for(sf, run_id, {"running"})
    deadline = time.monotonic() + 60
    while "step 2/" not in sf("job", "logs", run_id, "--no-follow").out:
        assert time.monotonic() < deadline, "the job never logged step 2"
        time.sleep(0.2)
    stopped = sf("job", "stop", run_id[:6], "--json")
    assert stopped.code == 0, stopped.err
    assert stopped.json()["accepted"] is True  # type: ignore[index]
    view = wait_for(sf, run_id, {"stopped", "failed", "succeeded"})
    assert (view["status"], view["end_reason"]) == ("stopped", "stopped_by_user")
    log = sf("job", "logs", run_id, "--no-follow", "-n", "0").out
    assert "[signal] SIGTERM" in log
    again = sf("job", "stop", run_id, "--json").json()
    assert again["accepted"] is False  # type: ignore[index]
    assert "already stopped" in again["message"]  # type: ignore[index]


def test_logs_n0_after_the_run_ended_prints_the_whole_history(
    sf: Callable[..., Result],
    custom_lab: Callable[..., Lab],
) -> None:
    lab = custom_lab(steps=12)
    run_id = str(submit(sf, lab.root).json()["run_id"])  # type: ignore[index]
    wait_for(sf, run_id, {"succeeded", "failed"})
    full = sf("job", "logs", run_id, "-n", "0", "--no-follow")
    assert full.code == 0
    for step in range(1, 13):
        assert f"step {step}/12" in full.out
    tail = sf("job", "logs", run_id, "-n", "2", "--no-follow").out
    assert len(tail.splitlines()) == 2


def test_a_run_is_found_by_any_unambiguous_prefix(
    sf: Callable[..., Result],
    custom_lab: Callable[..., Lab],
) -> None:
    lab = custom_lab(steps=1)
    run_id = str(submit(sf, lab.root).json()["run_id"])  # type: ignore[index]
    view = sf("job", "status", run_id[:7], "--json").json()
    assert view["run_id"] == run_id  # type: ignore[index]
    missing = sf("job", "status", "r-zzzzzzzzzz")
    assert missing.code == 1
    assert "r-zzzzzzzzzz" in missing.err


def test_the_local_user_token_is_readable_only_by_its_owner(sf_home: Path) -> None:
    token = sf_home / "server" / "local-token"
    assert token.stat().st_mode & 0o777 == 0o600
    assert len(token.read_text().strip()) >= 32


def test_server_status_shows_url_pid_version_and_uptime(sf: Callable[..., Result]) -> None:
    got = sf("server", "status", "--json")
    assert got.code == 0
    body = got.json()
    assert isinstance(body, dict)
    assert str(body["url"]).startswith("http://127.0.0.1:")
    assert {"pid", "version", "uptime"} <= set(body)
