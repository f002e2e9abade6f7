"""CLI behaviour that needs no server: scaffolding and the errors of bad input."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from starforge.project.lab import Lab
from tests.conftest import Result


def test_init_then_new_make_a_lab_and_an_experiment(
    sf: Callable[..., Result],
    tmp_path: Path,
    sf_home: Path,
) -> None:
    assert sf("init", str(tmp_path / "lab"), "--name", "team", "--yes").code == 0
    made = sf("new", "g1", "--method", "trl/grpo", "--json", cwd=tmp_path / "lab")
    assert made.code == 0
    body = made.json()
    assert body["method"]["id"] == "trl/grpo"  # type: ignore[index]
    assert "experiments/g1/train.py" in body["files"]  # type: ignore[index]


def test_init_refuses_an_existing_lab_with_one_line(
    sf: Callable[..., Result],
    new_lab: Callable[..., Lab],
    sf_home: Path,
) -> None:
    lab = new_lab()
    got = sf("init", str(lab.root), "--yes")
    assert got.code == 1
    assert "already a lab" in got.err
    assert "Traceback" not in got.err


def test_submit_outside_a_lab_says_to_run_sf_init(
    sf: Callable[..., Result],
    tmp_path: Path,
    sf_home: Path,
) -> None:
    got = sf("submit", "x", "--profile", "h200:1", cwd=tmp_path)
    assert got.code == 1
    assert "not inside a StarForge lab" in got.err
    assert "sf init" in got.err


def test_unknown_experiment_lists_the_known_ones(
    sf: Callable[..., Result],
    new_lab: Callable[..., Lab],
    sf_home: Path,
) -> None:
    lab = new_lab(experiments_={"c1": "custom/custom"})
    got = sf("submit", "nope", "--profile", "h200:1", cwd=lab.root)
    assert got.code == 1
    assert "no experiment 'nope'" in got.err
    assert "c1" in got.err


def test_unknown_method_suggests_the_prefixed_ids(
    sf: Callable[..., Result],
    new_lab: Callable[..., Lab],
    sf_home: Path,
) -> None:
    lab = new_lab()
    got = sf("new", "g1", "--method", "grpo", cwd=lab.root)
    assert got.code == 2
    assert "did you mean trl/grpo" in got.err


def test_missing_profile_is_a_usage_error(
    sf: Callable[..., Result],
    new_lab: Callable[..., Lab],
    sf_home: Path,
) -> None:
    lab = new_lab(experiments_={"c1": "custom/custom"})
    got = sf("submit", "c1", cwd=lab.root)
    assert got.code == 2
    assert "--profile is required" in got.err


def test_missing_trl_inputs_name_every_flag(
    sf: Callable[..., Result],
    new_lab: Callable[..., Lab],
    sf_home: Path,
) -> None:
    lab = new_lab(experiments_={"g1": "trl/grpo"})
    got = sf("submit", "g1", "--profile", "h200:1", cwd=lab.root)
    assert got.code == 2
    assert "--model, --train-data, --validation-data" in got.err


def test_errors_are_json_documents_in_json_mode(
    sf: Callable[..., Result],
    new_lab: Callable[..., Lab],
    sf_home: Path,
) -> None:
    lab = new_lab(experiments_={"c1": "custom/custom"})
    got = sf("submit", "c1", "--json", cwd=lab.root)
    assert got.json()["error"]["code"] == "usage.profile"  # type: ignore[index]


def test_debug_shows_the_traceback(
    sf: Callable[..., Result],
    tmp_path: Path,
    sf_home: Path,
) -> None:
    import pytest

    from starforge.contract.errors import NotInLab

    with pytest.raises(NotInLab):
        sf("--debug", "submit", "x", "--profile", "h200:1", cwd=tmp_path)


def test_init_names_the_project_after_a_folder_with_a_space(
    sf: Callable[..., Result],
    tmp_path: Path,
    sf_home: Path,
) -> None:
    got = sf("init", str(tmp_path / "my lab"), "--yes")
    assert got.code == 0, got.err
    assert "created lab my-lab" in got.out
    assert "named 'my-lab' after the folder 'my lab'" in got.out
    assert "--name picks another" in got.out
    assert "name: my-lab\n" in (tmp_path / "my lab" / "starforge.yaml").read_text()


def test_init_keeps_a_folder_name_that_is_already_valid_and_says_nothing_more(
    sf: Callable[..., Result],
    tmp_path: Path,
    sf_home: Path,
) -> None:
    got = sf("init", str(tmp_path / "rl_lab.v2"), "--yes")
    assert got.code == 0
    assert "created lab rl_lab.v2" in got.out
    assert "after the folder" not in got.out


def test_an_invalid_project_name_points_at_the_name_option(
    sf: Callable[..., Result],
    tmp_path: Path,
    sf_home: Path,
) -> None:
    got = sf("init", str(tmp_path / "lab"), "--name", "my lab", "--yes")
    assert got.code == 2
    assert "invalid project name 'my lab'" in got.err
    assert "--name" in got.err.split("hint:", 1)[1]
    assert not (tmp_path / "lab").exists()


def test_a_folder_name_with_nothing_usable_asks_for_a_name(
    sf: Callable[..., Result],
    tmp_path: Path,
    sf_home: Path,
) -> None:
    got = sf("init", str(tmp_path / "ラボ"), "--yes")
    assert got.code == 2
    assert "cannot name the project after the folder 'ラボ'" in got.err
    assert "--name" in got.err
