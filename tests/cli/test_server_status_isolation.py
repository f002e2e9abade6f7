"""``sf server status`` says plainly how a real server keeps jobs apart: a uid of its own per run
on a root server whose storage every uid may enter, and elsewhere that jobs run as the server's
user, with what happens to members' runs (refused unless ``isolation: none``, or admitted
unseparated under it). Where it says runs are refused, a member's submission is refused too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from starforge.project import experiments
from starforge.project.lab import Lab
from tests.conftest import Result, commit_all
from tests.security.test_job_isolation import IMAGE, as_root, open_root
from tests.security.test_run_identities import lab_server, member

__all__ = ["open_root"]  # a fixture this module uses

pytestmark = pytest.mark.integration


def isolation_line(sf: Callable[..., Result]) -> tuple[str, str]:
    """(the ``job_user`` line, the ``isolation`` line) of ``sf server status``."""
    got = sf("server", "status")
    assert got.code == 0, got.err
    lines = {
        key.strip(): value.strip()
        for key, _, value in (line.partition(":") for line in got.out.splitlines())
    }
    return lines["job_user"], lines["isolation"]


@pytest.fixture
def lab_root_server(open_root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with lab_server(open_root, monkeypatch) as home:
        yield home


@as_root
def test_a_root_server_says_each_run_has_a_uid_of_its_own_and_the_range(
    lab_root_server: Path, sf: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STARFORGE_HOME", str(lab_root_server))  # `sf` set a home of its own
    job_user, isolation = isolation_line(sf)
    assert job_user == "a uid of its own per run (61184-64511)"
    assert isolation == (
        "runs are walled off: a uid of its own per run (61184-64511); no job reads, signals or "
        "changes another's"
    )


def one_run_lab(new_lab: Callable[..., Lab]) -> Lab:
    made = new_lab()
    experiments.new_experiment(made, "e1", "custom/custom")
    folder = made.root / "experiments" / "e1"
    (folder / "train.sh").write_text("#!/usr/bin/env bash\necho ok\n")
    (folder / "config.yaml").write_text("starforge:\n  observability: platform\n")
    commit_all(made.root, "add e1")
    return made


def test_a_server_that_runs_jobs_as_its_own_user_says_members_runs_are_refused_and_refuses_them(
    sf: Callable[..., Result], new_lab: Callable[..., Lab], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The suite's servers run jobs as their own user (STARFORGE_JOB_USER=""), root or not; this
    # one keeps the default refusal (the suite opts out of it).
    monkeypatch.setenv("STARFORGE_ISOLATION", "auto")
    assert sf("server", "start").code == 0
    try:
        job_user, isolation = isolation_line(sf)
        assert job_user == "(the server's user)"
        assert isolation == (
            "jobs run as the server's user and can read what it can (docs/security.md); with "
            "more than one user, members' runs are refused unless server.yaml says "
            "`isolation: none`"
        )
        bob = member(sf, monkeypatch, "bob")  # the admin and bob: more than one user
        args = ("--profile", "h200:1", "--image", IMAGE)
        refused = bob("submit", "e1", *args, cwd=one_run_lab(new_lab).root)
        assert refused.code == 2, refused.out
        assert "isolation: none" in refused.err and "runs no member's job" in refused.err
    finally:
        sf("server", "stop")


def test_a_server_with_isolation_none_says_members_jobs_are_not_separated(
    sf: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STARFORGE_ISOLATION", "none")  # as the suite's servers have it
    assert sf("server", "start").code == 0
    try:
        job_user, isolation = isolation_line(sf)
        assert job_user == "(the server's user)"
        assert isolation == (
            "jobs run as the server's user and can read what it can (docs/security.md); "
            "members' jobs are not separated from each other (isolation: none)"
        )
    finally:
        sf("server", "stop")
