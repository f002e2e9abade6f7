"""``sf secret`` refusals that need no server: a bad name, an empty value, an unreadable file."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest

from starforge.project.lab import Lab
from tests.conftest import Result, commit_all


def refused_before_any_server(got: Result, sf_home: Path) -> str:
    assert got.code == 2, got.err
    assert "Traceback" not in got.err + got.out
    assert not (sf_home / "server" / "server.json").exists()  # no server was started
    return got.err.strip().splitlines()[0]


def test_a_name_that_is_no_environment_variable_is_refused_locally(
    sf: Callable[..., Result], sf_home: Path
) -> None:
    line = refused_before_any_server(sf("secret", "set", "HF-TOKEN"), sf_home)
    assert "'HF-TOKEN' is not a secret name" in line


def test_an_empty_value_on_stdin_is_refused_and_never_sent(
    sf: Callable[..., Result], sf_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("\n"))
    line = refused_before_any_server(sf("secret", "set", "HF_TOKEN"), sf_home)
    assert line == "error: secret HF_TOKEN: the value is empty"


def test_an_unreadable_value_file_is_named(
    sf: Callable[..., Result], sf_home: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "nope.txt"
    got = sf("secret", "set", "HF_TOKEN", "--from-file", str(missing))
    assert "--from-file" in refused_before_any_server(got, sf_home)


def test_submit_refuses_a_secret_name_that_is_no_environment_variable_before_packing(
    sf: Callable[..., Result], sf_home: Path, new_lab: Callable[..., Lab]
) -> None:
    lab = new_lab(experiments_={"c1": "custom/custom"})
    got = sf(
        "submit", "c1", "--profile", "h200:1", "--image", "registry.example/t:1",
        "--observability-url", "https://wandb.example/p", "--secret", "my-token", cwd=lab.root,
    )  # fmt: skip
    assert "'my-token' is not a secret name" in refused_before_any_server(got, sf_home)


def test_a_config_asking_for_secrets_in_the_wrong_shape_is_refused_naming_the_key(
    sf: Callable[..., Result], sf_home: Path, new_lab: Callable[..., Lab]
) -> None:
    lab = new_lab(experiments_={"c1": "custom/custom"})
    (lab.root / "experiments" / "c1" / "config.yaml").write_text("secrets: HF_TOKEN\n")
    commit_all(lab.root, "secrets as a string")
    got = sf(
        "submit", "c1", "--profile", "h200:1", "--image", "registry.example/t:1",
        "--observability-url", "https://wandb.example/p", cwd=lab.root,
    )  # fmt: skip
    assert "'secrets' must be a list" in refused_before_any_server(got, sf_home)
