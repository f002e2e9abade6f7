"""``sf job rerun`` on a real server with real trl/sft training: the rerun of a finished run is a
new run with the same commit, spec and resolved config, made without an upload, that logs the
same loss at every step (the runs are seeded, on the CPU); an override is said and applied."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from starforge.contract.layout import RunLayout
from starforge.project.lab import Lab
from tests.conftest import Result
from tests.integration.conftest import wait_for
from tests.integration.test_lab_sweeps import sft_lab
from tests.integration.test_lifecycle import FINAL

pytestmark = [pytest.mark.integration, pytest.mark.training]

ARGS = [
    "--profile", "h200:1", "--model", "models/tiny-llama",
    "--train-data", "data/sft-train.jsonl", "--validation-data", "data/sft-val.jsonl",
    "-s", "max_steps=12", "-s", "logging_steps=1", "-s", "save_steps=1000",
    "-s", "eval_steps=1000", "-s", "learning_rate=0.0001",
]  # fmt: skip


def losses(sf: Callable[..., Result], run_id: str) -> list[dict[str, Any]]:
    body: Any = sf("job", "metrics", run_id, "-k", "loss", "--json").json()
    return [{k: s[k] for k in ("key", "steps", "values")} for s in body["series"]]


def resolved_config(view: dict[str, Any]) -> dict[str, Any]:
    """The config the runner was given (the run's ``run.json``)."""
    data = json.loads(RunLayout(Path(str(view["run_dir"]))).run_json.read_text())
    return dict(data["config"])


def test_a_rerun_of_a_finished_sft_run_reproduces_its_loss_at_every_step(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = sft_lab(new_lab)
    got = sf("submit", "s1", *ARGS, "--json", cwd=lab.root)
    assert got.code == 0, got.err
    submitted: Any = got.json()
    old = str(submitted["run_id"])
    first = wait_for(sf, old, FINAL, timeout=900)
    assert first["status"] == "succeeded", first["reason"]

    again = sf("job", "rerun", old[:8], "--json")
    assert again.code == 0, again.err
    made: Any = again.json()
    new = str(made["run_id"])
    assert new != old and made["rerun_of"] == old and made["changes"] == []
    assert made["files_uploaded"] == 0 and made["bytes_uploaded"] == 0
    package = submitted["files_uploaded"] + submitted["files_skipped"]
    assert made["package_files"] == package > 0  # the whole recorded package, reused
    second = wait_for(sf, new, FINAL, timeout=900)
    assert second["status"] == "succeeded", second["reason"]

    assert second["rerun_of"] == old and first["rerun_of"] == ""
    assert second["git_commit"] == first["git_commit"] != ""
    assert second["spec"] == first["spec"]
    assert resolved_config(second) == resolved_config(first)
    series = losses(sf, old)
    assert series and len(series[0]["steps"]) == 12
    assert losses(sf, new) == series  # the same loss at every step, exactly
    shown = sf("job", "status", new)
    assert shown.code == 0 and f"rerun of  {old}" in shown.out, shown.out

    changed = sf("job", "rerun", old, "-s", "learning_rate=0.001", "--profile", "h200:1")
    assert changed.code == 0, changed.err
    said = re.search(
        rf"rerun of {old} with learning_rate=0\.001 \(was 0\.0001\): (r-\w+) ", changed.out
    )
    assert said is not None, changed.out  # the one key that changed, and nothing else
    view: Any = sf("job", "status", said[1], "--json").json()
    assert view["rerun_of"] == old
    assert view["spec"]["hyperparams"] == {**first["spec"]["hyperparams"], "learning_rate": 0.001}
    assert sf("job", "stop", said[1]).code == 0  # its training is not this test's
    typo = sf("job", "rerun", old, "-s", "lerning_rate=0.001")
    assert typo.code == 2 and "lerning_rate" in typo.err and "`learning_rate`" in typo.err


def test_a_rerun_of_an_unknown_run_or_with_a_malformed_override_is_refused(
    sf: Callable[..., Result],
) -> None:
    unknown = sf("job", "rerun", "r-doesnotexist")
    assert unknown.code == 1 and "no run of yours matches 'r-doesnotexist'" in unknown.err
    bad_form = sf("job", "rerun", "r-doesnotexist", "-s", "learning_rate")
    assert bad_form.code == 2 and "expected KEY=VALUE" in bad_form.err
