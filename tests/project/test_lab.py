from __future__ import annotations

from pathlib import Path

import pytest

from starforge.contract.errors import LabExists, NotInLab
from starforge.project.lab import find_lab, init_lab
from tests.conftest import git


def test_init_creates_a_committed_lab_with_its_folders(tmp_path: Path) -> None:
    made = init_lab(tmp_path / "my-lab", name="rl-team")
    assert made.name == "rl-team"
    for sub in ("experiments", "configs", "common"):
        assert (made.root / sub).is_dir()
    assert "name: rl-team" in (made.root / "starforge.yaml").read_text()
    assert git(made.root, "log", "--oneline").count("\n") == 1
    assert git(made.root, "status", "--porcelain") == ""


def test_the_lab_gitignore_ignores_outputs_and_secret_looking_files(tmp_path: Path) -> None:
    made = init_lab(tmp_path / "lab")
    for name in ("outputs/x.bin", ".env", "id_rsa", "hf_token.txt", "server.pem"):
        path = made.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    assert git(made.root, "status", "--porcelain") == ""


def test_init_refuses_to_overwrite_an_existing_lab(tmp_path: Path) -> None:
    init_lab(tmp_path / "lab")
    with pytest.raises(LabExists, match="already a lab"):
        init_lab(tmp_path / "lab")


def test_init_refuses_a_folder_that_already_has_lab_folders(tmp_path: Path) -> None:
    (tmp_path / "lab" / "experiments").mkdir(parents=True)
    with pytest.raises(LabExists, match="experiments/"):
        init_lab(tmp_path / "lab")


def test_the_lab_is_found_from_any_folder_below_its_root(tmp_path: Path) -> None:
    made = init_lab(tmp_path / "lab")
    deep = made.root / "experiments" / "a" / "b"
    deep.mkdir(parents=True)
    assert find_lab(deep).root == made.root


def test_outside_a_lab_the_error_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(NotInLab) as err:
        find_lab(tmp_path)
    assert "sf init" in (err.value.hint or "")
