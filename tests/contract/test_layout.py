"""The files of a run, named once: a golden listing of one run's layout under a storage root."""

from __future__ import annotations

from pathlib import Path

import pytest

from starforge.contract.errors import InvalidName
from starforge.contract.layout import RunLayout, StorageLayout

ROOT = Path("root")
DIGEST = "ab" + "c" * 62


def test_one_run_has_the_documented_layout_under_its_root() -> None:
    store = StorageLayout(ROOT)
    run = store.run("alice", "lab", "grpo", "r-0123456789")
    named = {
        "beacon": store.beacon,
        "blob": store.blob(DIGEST),
        "dataset": store.dataset_cache("alice", "gsm8k", "v1"),
        "run": run.dir,
        "work": run.work,
        "unpacked": run.unpacked_marker,
        "out": run.out,
        "report_spool": run.report_spool,
        "log node 0": run.log(2),
        "log node 1": run.log(2, 1),
        "run.json": run.run_json,
        "binding": run.binding(2, 1),
        "runner record": run.runner_record(2, 1),
        "exit record": run.exit_record(2, 1),
        "events spool": run.events_spool(2, 1),
    }
    r = "runs/alice/lab/grpo/r-0123456789"
    work = f"{r}/work"
    assert {k: v.relative_to(ROOT).as_posix() for k, v in named.items()} == {
        "beacon": "control-plane.json",
        "blob": f"blobs/sha256/ab/{'c' * 62}",
        "dataset": "cache/datasets/alice/gsm8k/v1",
        "run": r,
        "work": work,
        "unpacked": f"{work}/.starforge-unpacked.json",
        "out": f"{r}/out",
        "report_spool": f"{r}/out/.starforge/report-spool",
        "log node 0": f"{r}/logs/attempt-2.log",
        "log node 1": f"{r}/logs/attempt-2.node-1.log",
        "run.json": f"{r}/state/run.json",
        "binding": f"{r}/state/attempt-2.node-1.binding.json",
        "runner record": f"{r}/state/attempt-2.node-1.runner.json",
        "exit record": f"{r}/state/attempt-2.node-1.exit.json",
        "events spool": f"{r}/state/attempt-2.node-1.events",
    }
    assert [p.name for p in run.subdirs] == ["work", "out", "logs", "state"]


def test_a_run_layout_is_the_same_from_its_directory_alone() -> None:
    run = StorageLayout(ROOT).run("alice", "lab", "grpo", "r-0123456789")
    assert RunLayout(run.dir) == run  # what the runner rebuilds from its binding's run_dir


@pytest.mark.parametrize("bad", ["..", "a/b", "", "x" * 300])
def test_a_run_path_refuses_names_that_escape_the_root(bad: str) -> None:
    with pytest.raises(InvalidName):
        StorageLayout(ROOT).run("alice", bad, "grpo", "r-0123456789")
