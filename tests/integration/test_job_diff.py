"""``sf job diff`` through a real server: two trl/sft runs of one lab that differ only by
``-s learning_rate`` differ in exactly one row, and a run of a later commit differs by its commit,
with the files changed between the commits read from the lab's git repository.

The runs need not train: the server is drained (``sf admin maintenance drain``), so submissions
are admitted (their config resolved, their datasets and image pinned) and stay queued."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from starforge.project.lab import Lab
from tests.conftest import Result, commit_all
from tests.integration.conftest import embedded_server
from tests.integration.test_lab_sweeps import SFT_ARGS, sft_lab

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A server of this module's own, drained: nothing it admits starts."""
    with embedded_server(tmp_path_factory.mktemp("sf-home")) as home:
        yield home


def submit(sf: Callable[..., Result], lab: Lab, *sets: str) -> str:
    got = sf("submit", "s1", *SFT_ARGS, *sets, "--json", cwd=lab.root)
    assert got.code == 0, got.err
    body: Any = got.json()
    assert body["status"] == "queued"
    return str(body["run_id"])


def test_two_runs_that_differ_in_learning_rate_differ_in_that_row_alone(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    drained = sf("admin", "maintenance", "drain", "--note", "compare without training")
    assert drained.code == 0, drained.err
    lab = sft_lab(new_lab)
    slow = submit(sf, lab, "-s", "learning_rate=1e-5")
    fast = submit(sf, lab, "-s", "learning_rate=3e-4")

    got = sf("job", "diff", slow, fast, "--json", cwd=lab.root)

    assert got.code == 0, got.err
    diff: Any = got.json()
    assert diff["runs"] == [slow, fast]
    assert diff["rows"] == [
        {"section": "hyperparams", "key": "learning_rate", "values": ["1e-05", "0.0003"]}
    ]
    assert diff["same"] > 10  # the rest was compared, and is the same
    assert "files_changed" not in diff  # one commit: nothing changed between them

    table = sf("job", "diff", slow[:8], fast[:8], cwd=lab.root)
    assert table.code == 0, table.err
    lines = [line.split() for line in table.out.splitlines() if line.strip()]
    assert lines == [
        ["SECTION", "KEY", slow, fast],
        ["hyperparams", "learning_rate", "1e-05", "0.0003"],
    ]

    # A later commit of the lab: the commit differs, and git names the file it changed.
    (lab.root / "experiments" / "s1" / "NOTES.md").write_text("lower learning rate next\n")
    commit_all(lab.root, "notes")
    later = submit(sf, lab, "-s", "learning_rate=1e-5")

    got = sf("job", "diff", slow, later, "--json", cwd=lab.root)

    assert got.code == 0, got.err
    diff = got.json()
    assert [(r["section"], r["key"]) for r in diff["rows"]] == [("commit", "git_commit")]
    assert diff["files_changed"] == ["experiments/s1/NOTES.md"]
    shown = sf("job", "diff", slow, later, cwd=lab.root)
    assert "files changed between the commits" in shown.out
    assert "experiments/s1/NOTES.md" in shown.out

    # Outside the lab the commits cannot be read: the diff is the same, without the files.
    elsewhere = sf("job", "diff", slow, later, "--json", cwd=lab.root.parent)
    outside: Any = elsewhere.json()
    assert outside["rows"] == diff["rows"] and "files_changed" not in outside

    too_few = sf("job", "diff", slow)
    assert too_few.code == 2 and "2 to 8 runs; 1 given" in too_few.err
