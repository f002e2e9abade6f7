"""`sf methods`, `sf ls`, `sf validate`: offline commands over the catalog and the lab."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable

import pytest

from starforge.catalog.loader import get_method
from starforge.contract.errors import Rejected
from starforge.contract.steps import check_steps
from starforge.project.lab import Lab
from tests.conftest import Result


def test_methods_lists_every_builtin_method(sf: Callable[..., Result]) -> None:
    got = sf("methods", "--json")
    ids = [m["id"] for m in got.json()]  # type: ignore[union-attr]
    assert {"trl/grpo", "custom/custom"} <= set(ids)


def test_methods_describes_a_methods_parameters(sf: Callable[..., Result]) -> None:
    got = sf("methods", "trl/grpo")
    assert got.code == 0
    assert "learning_rate" in got.out and "float (0, +inf)" in got.out


def test_a_method_lists_the_actions_then_may_add_and_the_hints_name_that_command(
    sf: Callable[..., Result],
) -> None:
    with pytest.raises(Rejected) as refused:
        check_steps(["deploy"], get_method("trl/sft").actions, "trl/sft")
    hint = refused.value.hint or ""
    command = hint.split("`")[1].split()  # the command the hint names, run as written
    assert command == ["sf", "methods", "trl/sft"]
    got = sf(*command[1:])
    assert got.code == 0, got.err
    assert "action export: sf submit ... --then export (0 GPU(s))" in got.out
    assert "action eval: sf submit ... --then eval (1 GPU(s), after export)" in got.out


def test_ls_shows_method_framework_and_lock_state(
    sf: Callable[..., Result],
    new_lab: Callable[..., Lab],
) -> None:
    lab = new_lab(experiments_={"g1": "trl/grpo", "c1": "custom/custom"})
    lock = lab.root / "experiments/g1/method.lock.json"
    data = json.loads(lock.read_text())
    data["method"]["digest"] = "sha256:" + "0" * 64
    lock.write_text(json.dumps(data))
    (lab.root / "experiments/broken").mkdir()
    rows = {r["experiment"]: r for r in sf("ls", "--json", cwd=lab.root).json()}  # type: ignore[union-attr]
    assert rows["g1"]["lock"] == "drifted"
    assert rows["c1"]["lock"] == "current"
    assert rows["broken"]["lock"] == "malformed"


def test_a_lock_a_newer_sf_wrote_with_fields_this_one_does_not_know_is_current(
    sf: Callable[..., Result],
    new_lab: Callable[..., Lab],
) -> None:
    lab = new_lab(experiments_={"g1": "trl/grpo"})
    lock = lab.root / "experiments/g1/method.lock.json"
    data = json.loads(lock.read_text())
    data["method"]["pinned_by"] = "sf 9.0"  # a field of a later version
    lock.write_text(json.dumps(data))
    rows = {r["experiment"]: r for r in sf("ls", "--json", cwd=lab.root).json()}  # type: ignore[union-attr]
    assert rows["g1"]["lock"] == "current"
    got = sf("validate", "g1", "--json", cwd=lab.root)
    assert got.code == 0, got.err
    assert got.json()["lock"] == "current"  # type: ignore[index]


def test_validate_reports_a_typo_with_a_suggestion(
    sf: Callable[..., Result],
    new_lab: Callable[..., Lab],
) -> None:
    lab = new_lab(experiments_={"g1": "trl/grpo"})
    got = sf("validate", "g1", "-s", "learnin_rate=0.1", cwd=lab.root)
    assert got.code == 2
    assert "no parameter 'learnin_rate'" in got.err
    assert "did you mean `learning_rate`?" in got.err


def test_validate_accepts_a_good_experiment(
    sf: Callable[..., Result],
    new_lab: Callable[..., Lab],
) -> None:
    lab = new_lab(experiments_={"g1": "trl/grpo"})
    got = sf("validate", "g1", "--json", cwd=lab.root)
    assert got.code == 0
    assert got.json()["lock"] == "current"  # type: ignore[index]


def test_submit_refuses_a_bad_set_before_contacting_any_server(
    sf: Callable[..., Result],
    new_lab: Callable[..., Lab],
) -> None:
    lab = new_lab(experiments_={"g1": "trl/grpo"})
    got = sf("submit", "g1", "--profile", "h200:1", "-s", "num_generations=1e3", cwd=lab.root)
    assert got.code == 2
    assert "'1e3' is not a whole number" in got.err


def test_custom_needs_an_image_and_a_malformed_digest_is_refused(
    sf: Callable[..., Result],
    new_lab: Callable[..., Lab],
) -> None:
    lab = new_lab(experiments_={"c1": "custom/custom"})
    missing = sf("submit", "c1", "--profile", "h200:1", cwd=lab.root)
    assert missing.code == 2 and "needs --image" in missing.err
    bad = sf("submit", "c1", "--profile", "h200:1", "--image", "reg.io/t@sha256:abc", cwd=lab.root)
    assert bad.code == 2 and "full sha256" in bad.err


def _methods_output(method_id: str, columns: str | None) -> str:
    """``sf methods METHOD_ID`` run as a user would, its output piped (not a terminal)."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = columns
    done = subprocess.run(
        [sys.executable, "-m", "starforge.cli.main", "methods", method_id],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return done.stdout


@pytest.mark.parametrize("columns", [None, "40"], ids=["piped", "narrow-terminal"])
def test_methods_never_cuts_a_parameter_name_and_wraps_the_doc(columns: str | None) -> None:
    method = get_method("nemo-rl/grpo")
    text = _methods_output(method.id, columns)
    assert "…" not in text
    first_cells = {line.split()[1] for line in text.splitlines() if len(line.split()) > 1}
    for name, param in method.params.items():
        assert name in first_cells, f"{name} is cut or missing"
        # every word of the doc is there, whole, however the column wrapped it
        for word in param.doc.split():
            assert word in text, f"{name}: {word!r} of its doc is missing"
    table = text.split("GROUP", 1)[1].splitlines()[1:]
    wrapped = [line for line in table if line.strip() and line.startswith(" ")]
    assert wrapped, "a long doc should continue on the next line, under its column"
