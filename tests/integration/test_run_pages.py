"""``sf job ls`` and ``GET /runs`` a page at a time: the pages of a listing cover every run once,
newest first, even when a run is submitted between two pages (keyset pagination on the runs'
``(created_at, id)``), and the hint under a page names the command for the next one.

Runs are written into the real server's database beside it (as ``bench/api_reads.py`` seeds a
year of history): what is listed, not how runs come to be, is under test.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from starforge.client import config
from starforge.client.http import Client
from starforge.server.db.engine import make_engine, make_sessions
from starforge.server.db.models import Run
from starforge.server.settings import load_settings
from tests.conftest import Result

RUN_ROW = re.compile(r"^(r-\S+)\s", re.MULTILINE)
NEXT_PAGE = re.compile(r"older runs: sf job ls (.*)$", re.MULTILINE)
START = datetime(2025, 3, 1, tzinfo=UTC)


def add_runs(home: Path, user: str, made: dict[str, datetime], project: str = "pages") -> None:
    """Finished runs of ``user`` in ``project`` created at the given times, written beside the
    server."""
    engine = make_engine(load_settings(home).db_url)
    try:
        with make_sessions(engine).begin() as session:
            session.add_all(
                Run(
                    id=run_id,
                    user=user,
                    project=project,
                    experiment="e",
                    method="custom/custom",
                    status="succeeded",
                    reason="the run ended",
                    spec={},
                    manifest={},
                    pools=[],
                    idempotency_key=run_id,
                    created_at=at,
                    updated_at=at,
                    ended_at=at,
                )
                for run_id, at in made.items()
            )
    finally:
        engine.dispose()


def history(home: Path, user: str, prefix: str, count: int) -> list[str]:
    """``count`` runs, two of them submitted in the same instant (the id breaks the tie); their
    ids newest first, as a listing orders them."""
    made = {f"r-{prefix}{i:04d}": START + timedelta(minutes=i) for i in range(count)}
    made[f"r-{prefix}tie1"] = made[f"r-{prefix}tie0"] = START + timedelta(minutes=3)
    add_runs(home, user, made)
    return sorted(made, key=lambda r: (made[r], r), reverse=True)


def mine(ids: list[str], prefix: str) -> list[str]:
    return [r for r in ids if r.startswith(f"r-{prefix}")]


def test_sf_job_ls_pages_cover_every_run_once_in_order_with_a_run_submitted_between(
    sf: Callable[..., Result], server_home: Path
) -> None:
    with client_of(server_home) as client:
        owner = client.whoami().user
    expected = history(server_home, owner, "cli", 8)
    first = sf("job", "ls", "--limit", "3")
    assert first.code == 0, first.err
    pages = [RUN_ROW.findall(first.out)]
    hint = NEXT_PAGE.search(first.err)
    assert hint is not None, first.err
    add_runs(server_home, owner, {"r-clinewest": datetime.now(UTC)})  # between two pages
    while hint is not None:
        assert hint[1].startswith("--limit 3 --before r-")
        page = sf("job", "ls", *hint[1].split())
        assert page.code == 0, page.err
        pages.append(RUN_ROW.findall(page.out))
        hint = NEXT_PAGE.search(page.err)
    listed = [run_id for page in pages for run_id in page]
    assert all(len(page) <= 3 for page in pages)
    assert mine(listed, "cli") == expected  # each once, newest first, none shifted by the new run
    assert "r-clinewest" not in listed
    assert RUN_ROW.findall(sf("job", "ls", "--limit", "1").out) == ["r-clinewest"]


def test_api_pages_follow_next_before_to_the_last_page(server_home: Path) -> None:
    with client_of(server_home) as client:
        owner = client.whoami().user
        expected = history(server_home, owner, "api", 5)
        first = client.list_runs(limit=4)
        listed = [r.run_id for r in first.runs]
        add_runs(server_home, owner, {"r-apinewest": datetime.now(UTC)})
        before = first.next_before
        while before is not None:
            assert before == listed[-1]  # the cursor is the last run shown
            page = client.list_runs(limit=4, before=before)
            listed += [r.run_id for r in page.runs]
            before = page.next_before
    assert mine(listed, "api") == expected
    assert "r-apinewest" not in listed and len(listed) == len(set(listed))


def test_a_projects_runs_are_listed_apart_from_the_others(server_home: Path) -> None:
    with client_of(server_home) as client:
        owner = client.whoami().user
        add_runs(server_home, owner, {"r-elsewhere1": START}, project="elsewhere")
        add_runs(server_home, owner, {"r-projpage1": START}, project="projpage")
        listed = client.list_runs(limit=1000, project="projpage")
    assert [r.run_id for r in listed.runs] == ["r-projpage1"] and listed.next_before is None


def test_a_page_after_an_unknown_run_is_refused_with_what_to_give(
    sf: Callable[..., Result], server_home: Path
) -> None:
    result = sf("job", "ls", "--before", "r-nosuchrun")
    assert result.code == 1
    assert "no run 'r-nosuchrun' to list from" in result.err
    assert "--before" in result.err


def client_of(home: Path) -> Client:
    found = config.read_server_file()
    assert found is not None, f"no server.json under {home}"
    return Client(str(found["url"]), token=config.read_local_token())


def test_a_sweep_is_listed_whole_so_before_is_a_usage_error(sf: Callable[..., Result]) -> None:
    result = sf("job", "ls", "--sweep", "any", "--before", "r-any")
    assert result.code == 2 and "a sweep is listed whole" in result.err
